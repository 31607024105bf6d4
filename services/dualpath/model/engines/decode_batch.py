"""One decode unit's per-GPU state (docs/engines.md): a DE's running batch with the sums a
decode step's roofline needs, the read-only view runtimes get of it, and the rate a step's
expert all-to-all gets on the GPU's CNIC. Split from decode.py, which runs the unit; compiled
in the same group (native/), so the unit reads these fields natively.
"""

from __future__ import annotations

from typing import NamedTuple

from dualpath.model.entities.metrics import BusyClock
from dualpath.model.entities.request import EngineState, Request
from dualpath.model.entities.steps import EngineSteps
from dualpath.model.links import Link


class DeBatch(BusyClock):
    """One DE's running requests and the sums a decode step's roofline needs; also the
    DE's busy clock (`Metrics.keep_busy`), so a chunk's accounting touches one object per
    DE instead of a dict entry and a float more."""

    __slots__ = (
        "a2a_pending", "att_sum", "bucket", "bucket_n", "ctx_sum", "eid", "engine", "fresh",
        "growing", "nbytes", "reqs", "rx", "steps", "t", "tx",
    )  # fmt: skip

    def __init__(self, engine: EngineState, tx: Link, rx: Link) -> None:
        super().__init__()
        self.engine = engine
        self.eid = engine.engine_id
        self.tx, self.rx = tx, rx  # the GPU's CNIC (fixed: the hardware is built once)
        self.reqs: dict[int, Request] = {}
        self.ctx_sum = 0  # Σ context over the batch at the unit's current step
        self.att_sum = 0  # Σ attended keys (DSA caps each at top-k)
        self.growing = 0  # requests whose attended keys still grow by one per step
        self.a2a_pending = 0.0  # all-to-all bytes of steps already run, not yet on the CNIC
        self.fresh = 0  # requests that joined at the start of the current chunk
        self.t = 0.0  # the current chunk's step time on this DE, and its all-to-all bytes
        self.nbytes = 0.0
        self.steps: EngineSteps | None = None  # the metrics' figures, once it has any
        # The batch size's `ITERATION_TOKENS` bucket, found again only when the size moves.
        self.bucket_n = -1
        self.bucket = 0


class DecodeBatch(NamedTuple):
    """A read-only view of one DE's running batch, for gauges (vLLM's running requests
    and KV cache usage): a runtime reads the batch through this, never the unit's state."""

    engine_id: str
    running: int  # requests in the batch
    context_tokens: int  # Σ context over the batch at the unit's current step (KV in HBM)


def a2a_rate(tx: Link, rx: Link, isolation: bool, high: float, denominator: float) -> float:
    """Rate a decode step's all-to-all gets on the slower of a GPU's two CNIC directions,
    given the flows on them now (one step's traffic is too small and too frequent to time as
    its own flow): with VL isolation the high-priority VL's share (`high` / `denominator`),
    else an equal share with every KV flow; a direction with no flow is the all-to-all's."""
    a, b = tx.rate, rx.rate
    n_tx, n_rx = len(tx.members), len(rx.members)
    if isolation:
        if n_tx:
            a = a * high / denominator
        if n_rx:
            b = b * high / denominator
    else:
        if n_tx:
            a = a / (1 + n_tx)
        if n_rx:
            b = b / (1 + n_rx)
    return a if a <= b else b  # min(a, b), which returns a on a tie too
