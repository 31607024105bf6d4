"""Calibrated roofline compute model and the model/GPU profiles it reads (docs/roofline.md).

See docs/roofline.md for the formulas, the efficiency fit and the Table 1 reproduction.
"""

from dualpath.model.roofline.calibration import (
    EndToEndResult,
    ProductionFigures,
    fit_end_to_end,
    fit_gemm_curve,
    fit_scale_overhead,
    kernel_only,
)
from dualpath.model.roofline.model import Roofline
from dualpath.model.roofline.profiles import (
    GpuProfile,
    ModelProfile,
    ProfileError,
    gpu_names,
    load_gpu,
    load_model,
    model_names,
)
from dualpath.model.roofline.table import batch_throughput, render_table, roofline_table

__all__ = [
    "EndToEndResult",
    "GpuProfile",
    "ModelProfile",
    "ProductionFigures",
    "ProfileError",
    "Roofline",
    "batch_throughput",
    "fit_end_to_end",
    "fit_gemm_curve",
    "fit_scale_overhead",
    "gpu_names",
    "kernel_only",
    "load_gpu",
    "load_model",
    "model_names",
    "render_table",
    "roofline_table",
]
