"""`dualpath calibrate`: fit the roofline's end-to-end factors to a user's step times.

Reads a measurement CSV (model/roofline/measurements.py defines the columns), fits one efficiency
scale s and one per-layer overhead o (model/roofline/calibration.py `fit_measurements`), and
writes a GPU profile YAML: the base GPU's peaks and kernel efficiencies, the fitted
`end_to_end` block, and a `calibration:` block with every row's residual. The file works
wherever a GPU profile does: `dualpath sim --gpu FILE.yaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dualpath.cli.common import check_out_path, fail

if TYPE_CHECKING:
    from dualpath.model.roofline.calibration import MeasuredFit
    from dualpath.model.roofline.profiles import GpuProfile

MEASUREMENTS_HELP = (
    "CSV with the header phase,batch,context_tokens,new_tokens,step_ms[,ep_gpus]: one "
    "measured prefill forward or decode step of `batch` equal requests per row (docs/roofline.md)"
)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a spreadsheet's BOM is not a column
    except FileNotFoundError:
        fail(f"{path}: no such measurement file")
    except IsADirectoryError:
        fail(f"{path}: is a folder; give the measurement CSV file")
    except UnicodeDecodeError:
        fail(f"{path}: not UTF-8 text; export the measurements as a UTF-8 CSV")
    except OSError as exc:
        fail(f"{path}: cannot read it ({exc.strerror or exc})")
    raise AssertionError("unreachable")  # fail raises


def profile_document(
    base: GpuProfile, fit: MeasuredFit, *, name: str, model: str, measurements: str
) -> dict[str, Any]:
    """The fitted GPU profile as plain data, in the shipped files' layout."""
    rows = fit.residuals
    n_pre = sum(r.row.phase == "prefill" for r in rows)
    how = (
        f"dualpath calibrate on {measurements} ({len(rows)} rows: {n_pre} prefill, "
        f"{len(rows) - n_pre} decode) with model {model}: least-squares fit of "
        "T = K/s + layers*o on relative errors, K = kernel-level roofline of each row"
    )
    clamp = "; the free fit gave o < 0, so o = 0 and s was refitted alone"
    clamp = clamp if fit.overhead_clamped else ""
    worst = fit.worst
    return {
        "name": name,
        "display_name": f"{base.display_name} (calibrated)",
        "source": f"Peaks and kernel efficiencies: GPU profile {base.name}. end_to_end: {how}.",
        "bf16_tflops": base.bf16_tflops,
        "fp8_tflops": base.fp8_tflops,
        "hbm_gb": base.hbm_gb,
        "hbm_tb_s": base.hbm_tb_s,
        "kernel": base.kernel.model_dump(),
        "end_to_end": {
            "source": f"{how}{clamp}. RMS relative error {fit.rms_rel_error:.4f}, max "
            f"{abs(worst.rel_error):.4f} (line {worst.row.line}).",
            "prefill_scale": _round(fit.scale),
            "decode_scale": _round(fit.scale),
            "layer_overhead_s": _round(fit.layer_overhead_s),
            "step_overhead_s": 0.0,  # folded into o, as in the shipped fit
        },
        "calibration": {
            "source": how,
            "model": model,
            "rows": len(rows),
            "rms_rel_error": _round(fit.rms_rel_error),
            "max_rel_error": _round(abs(worst.rel_error)),
            "max_rel_error_line": worst.row.line,
            "residuals": [
                {
                    "line": r.row.line,
                    "phase": r.row.phase,
                    "batch": r.row.batch,
                    "context_tokens": r.row.context_tokens,
                    "new_tokens": r.row.new_tokens,
                    "ep_gpus": r.row.ep_gpus,
                    "measured_ms": _round(r.row.step_s * 1e3),
                    "fitted_ms": _round(r.fitted_s * 1e3),
                    "rel_error": _round(r.rel_error),
                }
                for r in rows
            ],
        },
    }


def _round(x: float) -> float:
    return float(f"{x:.6g}")  # enough for a 1e-4 fit, short enough to read


def render_yaml(doc: dict[str, Any], fit: MeasuredFit, out_name: str) -> str:
    import yaml

    worst = fit.worst
    head = [
        "# GPU profile written by `dualpath calibrate` (docs/roofline.md, Calibrate).",
        f"# Fit: s = {fit.scale:.4f} (every efficiency x s), o = "
        f"{fit.layer_overhead_s * 1e6:.1f} us per layer per forward / step.",
        f"# Residuals over {len(fit.residuals)} rows: RMS {fit.rms_rel_error * 100:.2f} %, "
        f"max {abs(worst.rel_error) * 100:.2f} % (line {worst.row.line}); per row under "
        "calibration.residuals.",
        f"# Use it: dualpath sim --gpu {out_name} (fitted on model {doc['calibration']['model']}).",
    ]
    # One flow-style line per residual (block style would take nine lines per row); the
    # calibration block is the document's last key, so its residuals can follow the rest.
    residuals = doc["calibration"]["residuals"]
    rest = {**doc, "calibration": {k: v for k, v in doc["calibration"].items() if k != "residuals"}}
    body = yaml.safe_dump(rest, sort_keys=False, allow_unicode=True, width=96)
    rows = [
        "  - " + yaml.safe_dump(r, sort_keys=False, default_flow_style=True, width=1 << 16)
        for r in residuals
    ]
    return "\n".join(head) + "\n" + body + "  residuals:\n" + "".join(rows)


def calibrate(
    measurements: Annotated[Path, typer.Argument(help=MEASUREMENTS_HELP)],
    out: Annotated[Path, typer.Option(help="write the fitted GPU profile here (FILE.yaml)")],
    model: Annotated[str, typer.Option(help="model profile the measurements ran (name or YAML)")],
    gpu: Annotated[
        str, typer.Option(help="GPU profile whose peaks and kernel efficiencies are kept")
    ] = "h800",
    ep: Annotated[
        int | None, typer.Option(help="EP group size (GPUs) of rows without an ep_gpus value")
    ] = None,
    name: Annotated[str | None, typer.Option(help="profile name (default: GPU-calibrated)")] = None,
) -> None:
    """Fit the roofline's efficiency scale and per-layer overhead to measured step times and
    write a GPU profile (with every row's residual) for `dualpath sim --gpu FILE.yaml`."""
    from dualpath.model.roofline import ProfileError, load_gpu, load_model
    from dualpath.model.roofline.calibration import fit_measurements
    from dualpath.model.roofline.measurements import MeasurementError, parse_measurements
    from dualpath.model.roofline.profiles import GpuProfile

    if ep is not None and ep < 1:
        fail(f"--ep {ep}: must be at least 1 (GPUs in the expert-parallel group)")
    if out.suffix not in (".yaml", ".yml"):
        fail(f"--out {out}: must end in .yaml (that is how --gpu tells a file from a name)")
    check_out_path("--out", out)
    try:
        model_p, base = load_model(model), load_gpu(gpu)
    except ProfileError as exc:
        fail(str(exc))
        return
    text = _read_text(measurements)
    try:
        rows = parse_measurements(text, str(measurements), ep)
        fit = fit_measurements(model_p, base, rows)
    except MeasurementError as exc:
        fail(str(exc))
        return
    except ValueError as exc:  # the rows parse but give no (physical) fit
        fail(f"{measurements}: {exc}")
        return
    doc = profile_document(
        base, fit, name=name or f"{base.name}-calibrated", model=model_p.name,
        measurements=measurements.name,
    )  # fmt: skip
    GpuProfile.model_validate(doc)  # what we write must load: fail here, not in `sim`
    out.write_text(render_yaml(doc, fit, out.name), encoding="utf-8")
    worst = fit.worst
    typer.echo(
        f"s = {fit.scale:.4f}, o = {fit.layer_overhead_s * 1e6:.1f} us/layer"
        + (" (clamped: the free fit was negative)" if fit.overhead_clamped else "")
        + f"; {len(rows)} rows: RMS {fit.rms_rel_error * 100:.2f} %, max "
        f"{abs(worst.rel_error) * 100:.2f} % (line {worst.row.line})"
    )
    typer.echo(f"wrote {out}; use it with: dualpath sim --gpu {out}")


def register(app: typer.Typer) -> None:
    app.command()(calibrate)
