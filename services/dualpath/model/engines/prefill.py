"""Prefill engines (paper §4.1; docs/engines.md): layerwise prefill over both read paths, or the
non-layerwise mode of the Basic baseline (whole prompt KV in HBM).

The GPUs of one expert-parallel group run their forwards in lockstep (every MoE layer
ends in an all-to-all across the group), so a `PrefillUnit` owns the engines of one EP
group and each emulated layer step lasts as long as its slowest GPU. Dense models (DP
only) get one unit per GPU.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Sequence

from dualpath.model.engines.capacity import Join
from dualpath.model.engines.context import EngineContext, RequestHook
from dualpath.model.entities.request import EngineState, ReadPath, Request
from dualpath.model.policies.base import BatchItem

Batches = dict[str, list[BatchItem]]
# A forward's KV outputs, by the turns they hand over: (PE engine, DE engine), the flows one
# PE GPU sends one DE GPU; one key for the whole forward with `fidelity.handover=per-forward`
Outputs = dict[tuple[str, str], Join]
_WHOLE_FORWARD = ("", "")


class PrefillUnit:
    """A state machine on the clock's timers: idle, or in one forward that advances by
    callbacks (a layer group's loads are in, its compute is over, the all-to-all has
    moved). No task and no coroutine per step, so both runtimes drive the same code:
    the virtual core and the process runtime's asyncio loop (docs/engines.md)."""

    def __init__(
        self,
        ctx: EngineContext,
        engines: Sequence[EngineState],
        on_prefilled: RequestHook,
        on_released: RequestHook,
    ) -> None:
        self.ctx = ctx
        self.engines = list(engines)
        self.ready: dict[str, deque[Request]] = {e.engine_id: deque() for e in engines}
        self._on_prefilled = on_prefilled
        self._on_released = on_released
        self._busy = False  # a forward runs, or the next batch is due at this instant
        self.running: dict[str, int] = {}  # engine_id -> requests in its current forward
        # The forward in flight: its batches, the joins it waits on, and its pipeline.
        self._batches: Batches = {}
        self._a2a = Join()
        self._outputs: Outputs = {}
        self._loads = Join()
        self._group = 0  # index of the layer group whose loads `_loads` counts
        self._first = 0  # first layer of that group
        self._ls = 0.0  # when that group's loads started
        self._t_start = 0.0
        self._end = 0.0  # pipeline end: the last layer group's compute ends here
        self._compute = 0.0  # roofline compute of the forward's layer steps (TTFT breakdown)
        # Told when a forward has ended, before the next one is formed: the scheduler's
        # `per-forward` fetches (model/engines/fetches.py). None: nobody asks.
        self.on_forward_end: Callable[[PrefillUnit], None] | None = None
        # Told when a forward begins: a node process reports both to the scheduler, which
        # does not see this unit (runtimes/process/serving/forwards.py).
        self.on_forward_begin: Callable[[PrefillUnit], None] | None = None
        # Made once: a method read as a value is a new bound method each time (a generic
        # lookup, compiled too), and every layer group of every forward passes these two.
        self._loaded_cb: Callable[[], None] = self._loaded
        self._computed_cb: Callable[[], None] = self._computed

    @property
    def in_forward(self) -> bool:
        """A forward runs (or the next batch is due at this instant)."""
        return self._busy

    def enqueue(self, req: Request) -> None:
        """A request whose hit KV is in a DRAM buffer joins its PE's FIFO."""
        assert req.pe is not None
        self.ready[req.pe.engine_id].append(req)
        if not self._busy:  # idle: form a batch at the next event of this instant
            self._busy = True
            timing = self.ctx.timing
            timing.call_at(timing.now(), self._next_forward)

    def _next_forward(self) -> None:
        batches = self._form_batches()
        if not batches:
            self._busy = False
            return
        self._busy = True
        self._begin(batches)

    def _form_batches(self) -> Batches:
        ctx = self.ctx
        out: Batches = {}
        for e in self.engines:
            q = self.ready[e.engine_id]
            if not q:
                continue
            hbm = None if ctx.policy.layerwise else ctx.hw.gpu_of(e).kv_hbm
            batch = ctx.policy.form_batch(q, ctx.roofline.prefill_attention_time, hbm)
            if batch:
                out[e.engine_id] = batch
        return out

    # --- one forward: a layerwise pipeline ------------------------------------------------
    # Loads stream back to back, layer l computes once its KV is in HBM and layer l-1 is
    # done, and each layer's KV then streams to the DE buffer. A step of g layers is exact
    # for that pipeline when the load rate is steady within the step: with its load running
    # over [ls, le] (per layer d = (le - ls)/g) and its compute taking g*c, the step's last
    # layer ends at max(prev_end + g*c, ls + d + g*c, le + c): the first and last layers
    # bound it.
    def _begin(self, batches: Batches) -> None:
        ctx = self.ctx
        now = ctx.timing.now()
        self._record_attention(batches)
        self.running = {eid: len(batch) for eid, batch in batches.items()}
        for batch in batches.values():
            for item in batch:
                if item.request.t_sched < 0:  # queued until its first forward (vLLM's sense)
                    item.request.t_sched = now
        self._batches = batches
        if self.on_forward_begin is not None:
            self.on_forward_begin(self)
        self._a2a = self._start_a2a(batches)
        self._outputs = {}
        self._end = self._t_start = self._ls = now
        self._compute = 0.0
        self._group = self._first = 0
        self._loads = self._start_loads(batches, 0)
        self._loads.then(self._loaded_cb)

    def _loaded(self) -> None:
        """Layer group k's KV is in HBM: its compute ends at the pipeline's bound."""
        ctx = self.ctx
        timing = ctx.timing
        le = timing.now()
        k, cur_ls = self._group, self._ls
        nl = ctx.layer_groups[k]
        if k + 1 < len(ctx.layer_groups):  # the next group's loads stream meanwhile
            self._loads, self._ls = self._start_loads(self._batches, k + 1), le
        compute = self._compute_time(self._batches, self._first, nl)
        self._compute += compute
        self._first += nl
        if ctx.policy.layerwise:
            d = (le - cur_ls) / nl
            # nested two-argument max: compiled, the three-argument one is a generic call
            self._end = max(max(self._end + compute, cur_ls + d + compute), le + compute / nl)  # noqa: PLW3301
        else:  # Basic: the whole prompt's KV must be in HBM before the forward starts
            self._end = max(self._end, le) + compute
        timing.call_at(self._end, self._computed_cb)

    def _computed(self) -> None:
        """Layer group k computed: its KV streams toward the DE buffer."""
        ctx = self.ctx
        k = self._group
        self._start_outputs(self._batches, ctx.layer_groups[k], self._outputs)
        self._group = k + 1
        if self._group < len(ctx.layer_groups):
            self._loads.then(self._loaded_cb)
        else:  # the forward ends when its expert all-to-all has moved too
            self._a2a.then(self._ended)

    def _ended(self) -> None:
        ctx = self.ctx
        # whatever of the pipeline is not compute was spent waiting for KV loads
        stall = max(0.0, self._end - self._t_start - self._compute)
        ctx.metrics.forwards += 1
        spent = ctx.timing.now() - self._t_start
        batches = self._batches
        for batch in batches.values():
            for item in batch:
                item.request.forward_s += spent
                item.request.load_wait_s += stall
        self._batches = {}
        self._finish_forward(batches, self._outputs)
        if self.on_forward_end is not None:  # between forwards: what an engine loop takes
            self.on_forward_end(self)  # in, before it forms its next batch
        self._next_forward()

    def _start_a2a(self, batches: Batches) -> Join:
        """Expert all-to-all of the whole forward on the high-priority VL, one flow per CNIC
        direction (per-layer flows would multiply events for no visible difference)."""
        ctx = self.ctx
        join = Join()
        for eid, batch in batches.items():
            nbytes = ctx.a2a_bytes(sum(i.new_tokens for i in batch), ctx.roofline.layers)
            if nbytes > 0:
                gpu = ctx.hw.gpus[eid]
                # The GPU sends and receives the same volume at once: one flow across both
                # directions of its CNIC. Model traffic is never skipped, not by the Oracle.
                hops = [gpu.cnic_tx, gpu.cnic_rx]
                ctx.hw.fabric.start(nbytes, hops, ctx.model_vl, join.add())
        return join

    # --- one layer group ----------------------------------------------------------------
    def _start_loads(self, batches: Batches, k: int) -> Join:
        """Hit/cached KV of the batch for layer group k into each PE's HBM."""
        ctx = self.ctx
        nl = ctx.layer_groups[k]
        join = Join()
        for eid, batch in batches.items():
            pe = ctx.hw.gpus[eid].engine
            by_src: dict[str, tuple[EngineState, float]] = {}
            for item in batch:
                req = item.request
                nbytes = float(req.computed * ctx.kv_token_layer * nl)
                if nbytes <= 0:
                    continue
                if req.computed == req.hit:
                    ctx.metrics.integrity.bytes_to_prefill_hbm += nbytes
                else:
                    ctx.metrics.integrity.bytes_reloaded += nbytes
                if req.path is ReadPath.SPLIT:  # each part from the buffer it was read into
                    assert req.de is not None
                    local = float(min(req.pe_part, req.computed) * ctx.kv_token_layer * nl)
                    for side, part in ((pe, local), (req.de, nbytes - local)):
                        prev = by_src.get(side.engine_id, (side, 0.0))[1]
                        by_src[side.engine_id] = (side, prev + part)
                    continue
                src = pe if req.path is ReadPath.PE else req.de
                assert src is not None
                prev = by_src.get(src.engine_id, (src, 0.0))[1]
                by_src[src.engine_id] = (src, prev + nbytes)
            for src, load in by_src.values():
                hops = ctx.hw.h2d_hops(pe) if src is pe else ctx.hw.remote_load_hops(src, pe)
                ctx.move(load, hops, ctx.kv_vl, join.add())
        return join

    def _compute_time(self, batches: Batches, first: int, nl: int) -> float:
        """Roofline time of `nl` layers on the slowest GPU: the EP group steps together."""
        ctx = self.ctx
        longest = 0.0
        for eid, batch in batches.items():
            shapes = [(i.request.computed, i.new_tokens) for i in batch]
            t = ctx.roofline.prefill_time(shapes, nl, first)
            ctx.metrics.add_busy(eid, t)
            longest = max(longest, t)
        return longest

    def _start_outputs(self, batches: Batches, nl: int, outputs: Outputs) -> None:
        """Layer KV toward the DE buffer: PE path ships hit + new, DE path only new."""
        ctx = self.ctx
        whole = ctx.handover_per_forward
        for eid, batch in batches.items():
            pe = ctx.hw.gpus[eid].engine
            by_dst: dict[str, tuple[EngineState, float]] = {}
            for item in batch:
                req = item.request
                tokens = item.new_tokens
                if req.path is ReadPath.PE and req.computed == req.hit:
                    tokens += req.hit
                elif req.path is ReadPath.SPLIT and req.computed == req.hit:
                    tokens += req.pe_part  # the DE buffer has only the DE part of the hit
                de = req.de
                assert de is not None
                prev = by_dst.get(de.engine_id, (de, 0.0))[1]
                by_dst[de.engine_id] = (de, prev + tokens * ctx.kv_token_layer * nl)
            for de, nbytes in by_dst.values():
                key = _WHOLE_FORWARD if whole else (eid, de.engine_id)
                join = outputs.get(key)
                if join is None:
                    join = outputs[key] = Join()
                ctx.move(nbytes, ctx.hw.kv_out_hops(pe, de), ctx.kv_vl, join.add())

    # --- end of a forward -----------------------------------------------------------------
    def _finish_forward(self, batches: Batches, outputs: Outputs) -> None:
        now = self.ctx.timing.now()
        whole = self.ctx.handover_per_forward
        self.running = {}
        completed: dict[tuple[str, str], list[Request]] = {}
        for eid, batch in batches.items():
            tokens = 0  # this engine's step: prompt tokens computed + first tokens sampled
            for item in batch:
                req = item.request
                req.computed += item.new_tokens
                tokens += item.new_tokens
                if req.computed >= req.prompt:
                    req.t_first = now  # the PE samples the first token
                    tokens += 1
                    assert req.de is not None
                    key = _WHOLE_FORWARD if whole else (eid, req.de.engine_id)
                    completed.setdefault(key, []).append(req)
                    self._on_released(req)
            self.ctx.metrics.steps_of(eid).iteration_tokens.add(tokens)
        # Handed over once their layers' KV is in the DE buffer: each turn when the flows that
        # carry its own KV have landed, as a decode server polls each request's transfer
        # (docs/fidelity.md, "When a prefilled turn reaches its DE").
        for key, reqs in completed.items():
            outputs[key].then(functools.partial(self._deliver, reqs))

    def _deliver(self, completed: list[Request]) -> None:
        for req in completed:
            self._on_prefilled(req)

    def _record_attention(self, batches: Batches) -> None:
        ctx = self.ctx
        times = []
        for e in self.engines:
            batch = batches.get(e.engine_id, [])
            shapes = [(i.request.computed, i.new_tokens) for i in batch]
            times.append(ctx.roofline.prefill_attention_time(shapes) if shapes else 0.0)
        avg = sum(times) / len(times)
        if avg > 0:
            ctx.metrics.attention_balance.append((ctx.timing.now(), max(times) / avg))
