"""`dualpath deploy TARGET`: deployment files generated from a scenario (registered on the
main app). `deploy k8s` writes a kustomize overlay (docs/deployment.md), `deploy compose` a
Docker Compose file (docs/containers.md); further targets are further commands of
`deploy_app`. `register` also installs `dualpath experiment` with its Kubernetes steps
(`--emit k8s`, `--index`, `--collect`: dualpath.cli.experiment)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dualpath.cli.common import check_out_path, fail, validate

if TYPE_CHECKING:
    from dualpath.deploy.k8s import Target

deploy_app = typer.Typer(
    no_args_is_help=True,
    help="Deployment files generated from a scenario (presets or FILE.yaml, --set overrides).",
)


def _overlay_target(
    preset: str, sets: list[str], name: str | None, runtime: str, locust_workers: int,
    deadline: int | None, image: str | None, out: Path | None, base: Path | None,
) -> Target:  # fmt: skip
    """Check the flags and build the `Target` (errors: one line naming the flag, exit 2)."""
    from dualpath.deploy.k8s import RUNTIMES, SIM_DEADLINE_S, Target, check_name, default_name

    if runtime not in RUNTIMES:
        fail(f"--runtime {runtime!r}: accepted: {', '.join(RUNTIMES)}")
    if locust_workers < 0:
        fail(f"--locust-workers must be >= 0 (0 = no Locust), got {locust_workers}")
    if runtime == "sim" and locust_workers != 1:
        fail("--locust-workers: only with --runtime cluster (the sim has no live API)")
    if deadline is not None and (runtime != "sim" or deadline < 1):
        fail(f"--deadline {deadline}: only with --runtime sim, in seconds >= 1")
    chosen = name or default_name(preset, tuple(sets))
    if chosen is None:
        fail("--name: required with --set (it names the overlay and its scenario), "
              "e.g. --name paper-ds660b-48p96d")  # fmt: skip
        raise AssertionError  # not reached: fail exits
    if (why := check_name(chosen)) is not None:
        flag = "--name" if name else f"--preset {preset} (its name)"
        fail(f"{flag} {chosen!r}: {why}; give --name")
    if image is not None and (not image or any(c.isspace() for c in image)):
        fail(f"--image {image!r}: give REPOSITORY[:TAG], e.g. registry:5000/dualpath-testbed:v1")
    t = Target(preset, tuple(sets), chosen, runtime, locust_workers,
               deadline or SIM_DEADLINE_S, image)  # fmt: skip
    default_out, default_base = t.defaults
    out_s = str(out) if out is not None else default_out
    base_s = str(base) if base is not None else default_base
    if not (Path(base_s) / "kustomization.yaml").is_file():
        fail(f"--base {base_s}: no kustomization.yaml there; run from the repository root "
              "or give --base PATH/k8s/" + ("sim" if runtime == "sim" else "base"))  # fmt: skip
    return dataclasses.replace(t, out=out_s, base=base_s)


@deploy_app.command("k8s")
def k8s(
    preset: Annotated[str, typer.Option(help="preset name or FILE.yaml")] = "smoke",
    sets: Annotated[
        list[str] | None, typer.Option("--set", help="path.to.key=value (repeat)")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="overlay name, suffix of every object (default: preset's)")
    ] = None,
    runtime: Annotated[
        str, typer.Option(help="cluster: one pod per service and node; sim: `dualpath sim` Job")
    ] = "cluster",
    locust_workers: Annotated[
        int, typer.Option(help="cluster: Locust workers beside the master (0: no Locust)")
    ] = 1,
    deadline: Annotated[
        int | None, typer.Option(help="sim: the Job's activeDeadlineSeconds (default 7200)")
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="REPOSITORY[:TAG] instead of dualpath-testbed:dev")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="overlay folder (default k8s/overlays/NAME, sim-NAME)")
    ] = None,
    base: Annotated[
        Path | None, typer.Option(help="the kustomize base (default k8s/base, k8s/sim)")
    ] = None,
    check: Annotated[
        bool, typer.Option(help="write nothing: exit 1 if OUT differs from a fresh generation")
    ] = False,
) -> None:
    """Write the kustomize overlay of a scenario: replicas from its topology, sized pods."""
    from dualpath.deploy.k8s import command, differences, overlay_files, scenario_text
    from dualpath.model.config.presets import ConfigError, resolve

    t = _overlay_target(preset, sets or [], name, runtime, locust_workers, deadline, image,
                        out, base)  # fmt: skip
    # The pods see only the files: a DP_* override here would size the StatefulSets for a
    # scenario that no pod runs.
    env = sorted(k for k in os.environ if k.upper().startswith("DP_"))
    if env:
        fail(f"environment {env[0]}: deploy k8s writes what the files say; unset DP_* "
              "variables and give overrides with --set")  # fmt: skip
    try:
        sc = resolve(preset, {}, list(t.sets))
        validate(sc)
        scenario_text(t)
    except ConfigError as exc:
        fail(str(exc))
    except (ValueError, KeyError, OSError) as exc:  # unknown model/policy, bad topology
        fail(f"--preset {preset}: {exc}")
    files = overlay_files(t, sc)
    folder = Path(t.out)
    if check:
        problems = differences(files, folder)
        if problems:
            fail(f"{'; '.join(problems)}: regenerate with `{command(t)}`", code=1)
        typer.echo(f"{folder}: up to date")
        return
    check_out_path("--out", folder, folder=True)
    for fname, text in files.items():
        (folder / fname).write_text(text, encoding="utf-8")
        typer.echo(f"wrote {folder / fname}")
    stray = [p.name for p in folder.iterdir() if p.name not in files]
    if stray:
        typer.echo(f"note: {folder} also holds {', '.join(sorted(stray))} (not generated)")
    typer.echo(f"render: kubectl kustomize {folder}   run: kubectl apply -k {folder} -n NS")


@deploy_app.command("compose")
def compose(
    preset: Annotated[str, typer.Option(help="preset name or FILE.yaml")] = "smoke",
    sets: Annotated[
        list[str] | None, typer.Option("--set", help="path.to.key=value (repeat)")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="compose file (default: docker-compose.yml for smoke, else "
            "deploy/compose/NAME/docker-compose.yml; required with --set)"
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option(help="write nothing: exit 1 with a diff if the files differ")
    ] = False,
) -> None:
    """Write the compose file of a scenario (+ monitoring/prometheus.yml, scenario.yaml)."""
    import difflib

    from dualpath.deploy.compose import Target, command, compose_files, default_out
    from dualpath.model.config.presets import ConfigError, resolve

    items = tuple(sets or [])
    out_s = str(out) if out is not None else default_out(preset, items)
    if out_s is None:
        fail("--out: required with --set (its folder names the variant), e.g. "
              "--out deploy/compose/ds660b-3p5d/docker-compose.yml")  # fmt: skip
        raise AssertionError  # not reached: fail exits
    # Paths inside the file are relative to the repository root (build context, Grafana).
    if Path(out_s).is_absolute() or ".." in Path(out_s).parts:
        fail(f"--out {out_s}: give a path inside the repository, relative to its root")
    if not Path("Dockerfile").is_file():
        fail("deploy compose: no Dockerfile here; run it from the repository root")
    env = sorted(k for k in os.environ if k.upper().startswith("DP_"))
    if env:  # the containers see only the files, not this shell's DP_* overrides
        fail(f"environment {env[0]}: deploy compose writes what the files say; unset DP_* "
              "variables and give overrides with --set")  # fmt: skip
    t = Target(preset, items, Path(out_s).as_posix())
    try:
        sc = resolve(preset, {}, list(items))
        validate(sc)
        files = compose_files(t, sc)
    except ConfigError as exc:
        fail(str(exc))
    except (ValueError, KeyError, OSError) as exc:  # unknown model/policy, bad topology
        fail(f"--preset {preset}: {exc}")
    if check:
        diff: list[str] = []
        for name, text in files.items():
            path = Path(name)
            old = path.read_text(encoding="utf-8") if path.is_file() else ""
            diff += difflib.unified_diff(old.splitlines(keepends=True),
                                         text.splitlines(keepends=True),
                                         f"{name} (committed)", f"{name} (generated)")  # fmt: skip
        if diff:
            typer.echo("".join(diff), nl=False)
            fail(f"{', '.join(files)}: differ from the generator; regenerate with "
                  f"`{command(t)}`", code=1)  # fmt: skip
        typer.echo(f"{t.out}: up to date")
        return
    for name, text in files.items():
        check_out_path("--out", Path(name))
        try:
            Path(name).write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(f"--out {t.out}: cannot write {name} ({exc.strerror or exc})")
        typer.echo(f"wrote {name}")
    where = "" if t.folder == Path(".") else f" -f {t.out}"
    typer.echo(f"run: docker compose{where} up -d")


def register(app: typer.Typer) -> None:
    app.add_typer(deploy_app, name="deploy")
