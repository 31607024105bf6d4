"""`dualpath` command line: the app and its command groups, one module each (cli/*.py).
Commands only parse, build Settings and call the runtimes."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from dualpath.cli.common import fail


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except NoArgsIsHelpError:
        raise  # `dualpath` alone prints the help, as it should
    except UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "dualpath"
        msg = " ".join(exc.format_message().split())
        fail(f"{where}: {msg} (see `{where} --help`)", exc.exit_code)


class _OneLineErrors(TyperGroup):
    """A malformed flag (unknown option, value of the wrong type, missing argument) is one
    line naming it, exit 2, like every other bad input, instead of click's usage box. Both
    the group's own parsing and its subcommands' (which happens in `invoke`) are covered."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage_errors():
            return super().invoke(ctx)


app = typer.Typer(
    cls=_OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    help="DualPath testbed: emulate PD-disaggregated inference with dual-path KV loading.",
)


def _register_cluster_commands() -> None:
    from dualpath.cli.calibrate import register as register_calibrate  # fit a GPU profile
    from dualpath.cli.catalog import register as register_catalog  # roofline, policies, presets
    from dualpath.cli.cluster import register as register_containers  # cluster (compose)
    from dualpath.cli.deploy import register as register_deploy  # deploy (k8s, compose)
    from dualpath.cli.experiment import register as register_experiment  # experiment NAME
    from dualpath.cli.load import register as register_load  # load (Locust as a subprocess)
    from dualpath.cli.plan import register as register_plan  # plan (the capacity planner)
    from dualpath.cli.serve import register  # serve, up, run (the process runtime)
    from dualpath.cli.sim import register as register_sim  # sim (the virtual-time runtime)

    register_sim(app)
    register(app)
    register_load(app)
    register_containers(app)
    register_deploy(app)
    register_calibrate(app)
    register_catalog(app)
    register_experiment(app)
    register_plan(app)


_register_cluster_commands()


def main() -> None:
    _ctrl_c_stops_us()
    app()


def _ctrl_c_stops_us() -> None:
    """A shell without job control starts `cmd &` with SIGINT ignored, and Python then leaves
    it ignored: SIGINT (Ctrl-C, `kill -INT`, a CI runner's stop) would not end `dualpath up`,
    `load` or `run`. Every command ends cleanly on KeyboardInterrupt, so take SIGINT back."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    main()
