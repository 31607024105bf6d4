"""Lower bounds on the JCT from the run's own record (report key `bounds`, docs/report.md).

Each bound is the time one resource needs for the work this run did, at its best rate:

- floor: the longest agent alone on an idle cluster (report/floor.py, offline only);
- prefill: every prefilled token on the PE GPUs (the engines' roofline): the attention of all
  requests as if in one batch (Σ of max ≥ max of Σ, so no split into forwards is faster) plus
  the projections/FFN per new token at the largest batch the policy forms of the run's mean
  request (compute quota, whole-prompt KV in HBM without layerwise prefill, the running cap,
  and no more requests than sessions per GPU), divided over the PE GPUs;
- decode: every generated token but the first (the PE makes it) on the DE GPUs: attention at
  its context plus the step's GEMMs and overheads per token at the largest batch HBM allows
  (each request holds prompt + gen tokens of KV; lengths weighted by their decode steps), the
  running cap, and no more requests than sessions per GPU;
- storage_read: the bytes read on each path over that side's SNICs at their read rate (the
  paths actually used); `pooled_s` is the same bytes over every SNIC (a perfect split);
- cnic: all compute-network bytes over every CNIC direction.

Left out, so each is below any real run: the expert all-to-all (overlapped), imbalance between
GPUs and SNICs, and every wait. The largest bound binds; `jct_over` says how far the run is
above each. Batches are estimates at the mean request (a tail of long prompts forms smaller
ones), so prefill and decode are a bound for a run of mean-shaped requests.

Online runs add `ttft_stages`: the TTFT breakdown's shares in the paper's four stages next to
Fig. 12 (left), where the policy and APS match a reading of it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

import numpy as np

from dualpath.model.entities.metrics import RequestLog, RequestRecord

_PROBE = 1 << 20  # context used to read the decode step's per-token attention slopes
BOUNDS = ("floor", "prefill", "decode", "storage_read", "cnic")


class Compute(Protocol):
    """What the bounds use of `dualpath.model.roofline.Roofline` (the engines' compute model)."""

    kv_bytes_per_token: int

    def prefill_time(self, batch: Sequence[tuple[int, int]]) -> float: ...
    def prefill_attention_time(self, batch: Sequence[tuple[int, int]]) -> float: ...
    def decode_step_time(self, batch_size: int, sum_context: int, sum_attended: int) -> float: ...
    def attended(self, ctx: int) -> int: ...


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the bounds need of the cluster and the policy (no live objects)."""

    pe_gpus: int
    de_gpus: int
    pe_nodes: int
    de_nodes: int
    kv_hbm_pe: float  # bytes per GPU left for KV
    kv_hbm_de: float
    snic_read_bytes_s: float  # per node, at the storage read efficiency
    cnic_bytes_s: float  # per GPU, each direction
    layerwise: bool
    compute_quota_s: float | None  # None: the policy packs forwards without a quota
    max_running_pe: int | None  # requests per prefill forward (None: no cap)
    max_running_de: int | None  # requests resident per decode GPU
    sessions: int  # at most one turn per session in flight
    # the Oracle baseline moves KV in zero time: what it would read bounds nothing
    io_bypassed: bool = False


@dataclass(frozen=True, slots=True)
class Traffic:
    read_bytes_by_path: Mapping[str, float]  # "pe", "de" (a split read counts on each side)
    cnic_bytes: float  # summed over every CNIC direction (a transfer counts at both ends)


def _limit(limits: Mapping[str, float | None]) -> tuple[int, str]:
    """The smallest of the applicable batch limits (at least 1) and its name."""
    known = {k: v for k, v in limits.items() if v is not None}
    name = min(known, key=lambda k: known[k] or 0.0)
    return max(1, int((known[name] or 0.0) * (1 + 1e-9))), name  # 0.3 / 0.1 is 3 requests


def prefill_bound(
    pe: Compute, f: ClusterFacts, shapes: Sequence[tuple[int, int]]
) -> dict[str, Any]:
    """`shapes`: (hit, new) of every request that prefilled new tokens."""
    new = sum(map(itemgetter(1), shapes))  # C speed: a row per turn
    if new <= 0 or f.pe_gpus <= 0:
        return {"s": 0.0, "tokens": 0, "attention_s": 0.0, "batch_requests": 0,
                "batch_tokens": 0, "batch_limit": "none", "per_token_s": 0.0}  # fmt: skip
    attention = pe.prefill_attention_time(shapes)
    hit = sum(map(itemgetter(0), shapes)) / len(shapes)
    append = new / len(shapes)
    mean = [(round(hit), max(1, round(append)))]
    one_att = pe.prefill_attention_time(mean)
    limits: dict[str, float | None] = {
        "sessions": math.ceil(f.sessions / f.pe_gpus),
        "quota": f.compute_quota_s / one_att if f.compute_quota_s and one_att > 0 else None,
        "hbm": None if f.layerwise else f.kv_hbm_pe / ((hit + append) * pe.kv_bytes_per_token),
        "cap": f.max_running_pe,
    }
    k, why = _limit(limits)
    batch = min(new, max(1, round(k * append)))
    per_token = (pe.prefill_time([(0, batch)]) - pe.prefill_attention_time([(0, batch)])) / batch
    return {
        "s": (attention + new * per_token) / f.pe_gpus,
        "tokens": new,
        "attention_s": attention,
        "batch_requests": k,
        "batch_tokens": batch,
        "batch_limit": why,
        "per_token_s": per_token,
    }


def decode_work(de: Compute, prompt: np.ndarray, gen: np.ndarray) -> tuple[int, float]:
    """(decode steps, their attention seconds on one GPU): request r decodes gen - 1 tokens,
    step k at context prompt + k (as report/floor.py). Attention is linear in Σ context and
    Σ attended keys, so it is the same whatever the batches."""
    n = np.maximum(gen - 1, 0).astype(np.float64)
    p = prompt.astype(np.float64)
    t0 = de.decode_step_time(1, 0, 0)
    d_ctx = (de.decode_step_time(1, _PROBE, 0) - t0) / _PROBE
    d_att = (de.decode_step_time(1, 0, _PROBE) - t0) / _PROBE
    topk = float(de.attended(1 << 40))  # huge when every key is attended
    sum_ctx = n * p + n * (n - 1) / 2
    m = np.clip(topk - p, 0, n)  # steps still below top-k
    sum_att = m * p + m * (m - 1) / 2 + (n - m) * topk
    return int(n.sum()), float(d_ctx * sum_ctx.sum() + d_att * sum_att.sum())


def decode_bound(
    de: Compute, f: ClusterFacts, prompt: np.ndarray, gen: np.ndarray
) -> dict[str, Any]:
    steps, attention = decode_work(de, prompt, gen)
    if steps <= 0 or f.de_gpus <= 0:
        return {"s": 0.0, "tokens": 0, "attention_s": 0.0, "batch": 0,
                "batch_limit": "none", "per_token_s": 0.0}  # fmt: skip
    weight = np.maximum(gen - 1, 0)
    length = float(np.average(prompt + gen, weights=weight))  # KV a slot holds, step-weighted
    limits: dict[str, float | None] = {
        "sessions": math.ceil(f.sessions / f.de_gpus),
        "hbm": f.kv_hbm_de / (length * de.kv_bytes_per_token),
        "cap": f.max_running_de,
    }
    b, why = _limit(limits)
    per_token = de.decode_step_time(b, 0, 0) / b
    return {
        "s": (attention + steps * per_token) / f.de_gpus,
        "tokens": steps,
        "attention_s": attention,
        "batch": b,
        "batch_limit": why,
        "per_token_s": per_token,
    }


def storage_bound(f: ClusterFacts, t: Traffic) -> dict[str, Any]:
    rate = f.snic_read_bytes_s
    sides = {"pe": f.pe_nodes, "de": f.de_nodes}
    by_path = {
        p: {
            "bytes": float(t.read_bytes_by_path.get(p, 0.0)),
            "snics": n,
            "s": float(t.read_bytes_by_path.get(p, 0.0)) / (n * rate) if rate > 0 else 0.0,
        }
        for p, n in sides.items()
    }
    total = sum(v["bytes"] for v in by_path.values())
    pooled = total / ((f.pe_nodes + f.de_nodes) * rate) if rate > 0 else 0.0
    return {
        "s": None if f.io_bypassed else max(v["s"] for v in by_path.values()),
        "bypassed": f.io_bypassed,
        "by_path": by_path,
        "pooled_s": pooled,
        "snic_read_gbs": rate / 1e9,
    }


def cnic_bound(f: ClusterFacts, t: Traffic) -> dict[str, Any]:
    capacity = 2 * (f.pe_gpus + f.de_gpus) * f.cnic_bytes_s  # rx + tx of every GPU
    return {"s": t.cnic_bytes / capacity if capacity > 0 else 0.0, "bytes": t.cnic_bytes}


def bounds_section(
    pe: Compute,
    de: Compute,
    facts: ClusterFacts,
    records: Collection[RequestRecord],
    traffic: Traffic,
    jct: float,
    floor_s: float | None,
) -> dict[str, Any]:
    """The report's `bounds`: each bound with `s` and `jct_over` (jct / s), and which binds."""
    if isinstance(records, RequestLog):  # the run's own: read by column, no record a row
        hit = np.asarray(records.column("hit"), dtype=np.int64)
        prompt = np.asarray(records.column("prompt"), dtype=np.int64)
        missed = prompt > hit  # vectorized: a row loop was a few per cent of a compiled run
        shapes = list(zip(hit[missed].tolist(), (prompt - hit)[missed].tolist(), strict=True))
        gen = np.asarray(records.column("gen"), dtype=np.int64)
    else:
        shapes = [(r.hit, r.prompt - r.hit) for r in records if r.prompt > r.hit]
        prompt = np.fromiter((r.prompt for r in records), dtype=np.int64, count=len(records))
        gen = np.fromiter((r.gen for r in records), dtype=np.int64, count=len(records))
    rows: dict[str, dict[str, Any]] = {
        "floor": {"s": floor_s},
        "prefill": prefill_bound(pe, facts, shapes),
        "decode": decode_bound(de, facts, prompt, gen),
        "storage_read": storage_bound(facts, traffic),
        "cnic": cnic_bound(facts, traffic),
    }
    for row in rows.values():
        s = row["s"]
        row["jct_over"] = jct / s if s else None
    binding = max(BOUNDS, key=lambda k: rows[k]["s"] or 0.0)
    return {"jct_s": jct, "binding": binding, **rows}


# Paper §7.4 Fig. 12 (left), DS 660B online: pixel readings of the bars (the APS ticks are not
# printed): Basic's scheduling share grows ≈21 % → 40 % → 73 % over the three APS groups, the
# last at APS 0.25; DualPath's allocating share is ≈6 % at APS 0.25.
FIG12_MODEL = "deepseek-v3.2"
FIG12_APS = 0.25
FIG12_BASIC_SCHEDULING = (0.21, 0.40, 0.73)
FIG12_AT_APS: dict[str, dict[str, float]] = {
    "basic": {"scheduling": 0.73},
    "dualpath": {"allocating": 0.06},
}
# Our six stages in the paper's four (docs/report.md, TTFT breakdown); `transfer` is the
# forward's stall on KV loads, counted with prefill.
PAPER_STAGES = {
    "scheduling": ("queue", "prefill_wait"),
    "allocating": ("buffer_wait",),
    "reading": ("read",),
    "prefill": ("transfer", "prefill"),
}


def paper_shares(share: Mapping[str, float | None]) -> dict[str, float | None]:
    """The breakdown's stage shares summed into the paper's four (None: not measured here;
    the process runtime has only `prefill`, which then holds prefill_wait and transfer)."""
    out: dict[str, float | None] = {}
    for k, parts in PAPER_STAGES.items():
        known = [share.get(p) for p in parts if share.get(p) is not None]
        out[k] = float(sum(v for v in known if v is not None)) if known else None
    return out


def ttft_stages(
    breakdown: Mapping[str, Any], policy: str, model: str, aps: float | None
) -> dict[str, Any]:
    """The run's TTFT shares in the paper's stages, and Fig. 12 (left) where it applies:
    the exact reading at APS 0.25 for `basic`/`dualpath` on DS 660B, else Basic's series."""
    ours = paper_shares(breakdown.get("share", {}))
    paper: dict[str, Any] | None = None
    if model == FIG12_MODEL and policy in FIG12_AT_APS:
        exact = aps is not None and abs(aps - FIG12_APS) < 1e-9
        paper = {
            "policy": policy,
            "aps": FIG12_APS if exact else None,
            "share": dict(FIG12_AT_APS[policy]) if exact else None,
            "basic_scheduling_by_aps_group": list(FIG12_BASIC_SCHEDULING),
            "source": "paper §7.4 Fig. 12 (left), pixel readings; APS ticks not printed "
            "except the last group (0.25)",
        }
    return {"aps": aps, "share": ours, "paper": paper}
