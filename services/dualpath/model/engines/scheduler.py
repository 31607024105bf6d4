"""The global scheduler shell: queues, group fetches, and the KV read of each request.

Decisions come from the `SchedulingPolicy`; this shell applies them, keeps `seq_e`,
`tok_e`, `read_q` and free HBM up to date, and moves the bytes. Each engine group's leader
fetches periodically (`engine.fetch_interval_ms`). `engine.fetch_mode = "on-change"`
skips the polls at which nothing the group cares about changed (no request queued, none of
its engines freed work): those polls would assign nothing, so the outcome is the same at a
fraction of the events. `"periodic"` polls every interval regardless. `"per-forward"`
(default) also holds a busy PE group's fetch until its forward ends (fetches.py).

The process runtime extends it (runtimes/process/serving/remote_scheduler.py,
runtimes/process/serving/recovery.py) through
public names only: the seams `start_read` and `contain` it overrides, and `down`,
`live_engines`, `spawn` and `storage_target` it uses (docs/architecture.md, "Seams").
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from dualpath.compiled import mypyc_attr
from dualpath.model.blocks import BlockCorrupted, BlockMissing, BlockRange
from dualpath.model.engines.capacity import CapacityError
from dualpath.model.engines.context import EngineContext
from dualpath.model.engines.decode import DecodeUnit
from dualpath.model.engines.fetches import GroupFetches
from dualpath.model.engines.kv_read import KvRead
from dualpath.model.engines.prefill import PrefillUnit
from dualpath.model.engines.split_read import whole_blocks
from dualpath.model.engines.tier_read import plan_tier
from dualpath.model.entities.queue import TokenQueue
from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.model.policies.base import release_prefill


@mypyc_attr(allow_interpreted_subclasses=True)
class GlobalScheduler:
    def __init__(
        self,
        ctx: EngineContext,
        pe_groups: Sequence[Sequence[EngineState]],
        de_groups: Sequence[Sequence[EngineState]],
    ) -> None:
        self.ctx = ctx
        self.pe_groups = [list(g) for g in pe_groups]
        self.de_groups = [list(g) for g in de_groups]
        self.pe_queue: deque[Request] = deque()
        self.de_queue: deque[Request] = deque()
        self.de_private: list[TokenQueue] = [TokenQueue() for _ in de_groups]
        self.pe_unit: dict[str, PrefillUnit] = {}
        self._pe_group_units: list[list[PrefillUnit]] | None = None  # `_pe_group_busy`
        self.de_unit: dict[str, DecodeUnit] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.fetches = GroupFetches(
            ctx.clock, ctx.engine, self.pe_groups, len(de_groups), self._fetch
        )
        self._fatal: asyncio.Future[None] | None = None
        # Nodes not to place on (lost: no heartbeat). Empty in a healthy run, so the
        # placement below takes its fast path and is exactly the paper's rules.
        self.down: set[str] = set()
        # Told of every turn whose last token is out (the virtual runtime's agents).
        self.finished: Callable[[Request], None] | None = None
        if getattr(ctx.policy, "splits_reads", False):  # model/policies/split.py
            # Only this class's start_read runs a split read as two flows; a runtime that
            # replaces the seam (processes: one ReadKv on one node) refuses it at start.
            if type(self).start_read is not GlobalScheduler.start_read:
                raise ValueError(
                    f"policy.name={ctx.policy.name}: split reads run on virtual time only "
                    "(dualpath sim, dualpath experiment); choose another policy here"
                )
            ctx.metrics.read_path.setdefault(ReadPath.SPLIT.value, 0)
        # A runtime that replaces the read seam says it reads the tier (`reads_tier`).
        replaced = type(self).start_read is not GlobalScheduler.start_read
        if ctx.tier is not None and (
            (replaced and not getattr(self, "reads_tier", False))
            or getattr(ctx.policy, "splits_reads", False)
        ):
            raise ValueError(
                "tier.dram_bytes_per_node: this runtime does not read the DRAM tier, and no "
                "runtime does with split reads; set it to 0 here"
            )
        if ctx.de_buffer_after_pe_read and type(self).start_read is not GlobalScheduler.start_read:
            raise ValueError(
                "fidelity.de_buffer_for_pe_reads=after-read runs on virtual time only (dualpath "
                "sim, dualpath experiment); use before-read here"
            )
        if ctx.engine.fetch_mode == "per-forward":
            # A runtime whose prefill units are elsewhere says it is told of their forwards
            # (`reports_forwards`) and overrides `_pe_group_busy`.
            if replaced and not getattr(self, "reports_forwards", False):
                raise ValueError(
                    "engine.fetch_mode=per-forward: this runtime's scheduler is not told when "
                    "its prefill engines' forwards end; use on-change here"
                )
            self.fetches.pe_busy = self._pe_group_busy
        self.fetches.start()

    @property
    def fatal(self) -> asyncio.Future[None]:
        """Set to the first failure of a `spawn`ed task (made on first use, so a scheduler
        on a clock without asyncio, the virtual core, needs no loop)."""
        if self._fatal is None:
            self._fatal = asyncio.get_running_loop().create_future()
        return self._fatal

    def stop(self) -> None:
        """Stop the periodic polls (nothing else keeps running on its own)."""
        self.fetches.stop()

    # --- entry points -------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        self._check_fits(req)
        self.pe_queue.append(req)
        self.fetches.kick("pe", self.fetches.pe_order())

    def _check_fits(self, req: Request) -> None:
        """A request no decode GPU could ever hold would wait forever: fail clearly instead."""
        de = self.de_groups[0][0]
        capacity = self.ctx.hw.gpu_of(de).kv_hbm
        need = req.length * self.ctx.kv_token
        if need > capacity:
            raise CapacityError(
                f"workload.max_len: a {req.length}-token request needs {need / 1e9:.1f} GB of "
                f"KV but a decode GPU has {capacity / 1e9:.1f} GB of HBM left after weights; "
                "lower --max-len, use a GPU with more HBM, or more decode nodes (larger EP group)"
            )

    def on_pe_released(self, req: Request) -> None:
        pe = req.pe
        assert pe is not None
        release_prefill(req)
        if req.path is ReadPath.PE and req.hit:
            self.ctx.hw.node_of(pe).buffer.release(req.hit * self.ctx.kv_token)
        elif req.path is ReadPath.SPLIT:
            self.ctx.hw.node_of(pe).buffer.release(req.pe_part * self.ctx.kv_token)
        self.fetches.kick("pe", [pe.group])

    def _pe_group_busy(self, g: int) -> bool:
        """Every prefill unit of PE group g is in a forward (per-forward fetches)."""
        per_group = self._pe_group_units
        if per_group is None:  # the units exist once the runtime has built them
            per_group = self._pe_group_units = [self._units_of(grp) for grp in self.pe_groups]
        return all(unit.in_forward for unit in per_group[g])

    def _units_of(self, group: list[EngineState]) -> list[PrefillUnit]:
        """The distinct prefill units of a PE group, in engine order: one per EP group (a
        64-GPU group has one unit, so the check above runs once, not 64 times, per kick)."""
        return list(dict.fromkeys(self.pe_unit[e.engine_id] for e in group))

    def on_pe_forward_end(self, unit: PrefillUnit) -> None:
        self.fetches.forward_ended(unit.engines[0].group)

    def on_prefilled(self, req: Request) -> None:
        assert req.de is not None
        self.de_unit[req.de.engine_id].receive(req)

    def on_decoded(self, req: Request) -> None:
        assert req.de is not None
        self.fetches.kick("de", [req.de.group])
        if self.finished is not None:
            self.finished(req)

    # --- fetches (their timing: model/engines/fetches.py) -------------------------------------
    def _fetch(self, side: str, g: int) -> None:
        if side == "pe":
            self._fetch_prefill(g)
        else:
            self._fetch_decode(g)

    def live_engines(self, group: list[EngineState]) -> list[EngineState]:
        """The engines of `group` on nodes not `down` (the group itself in a healthy run)."""
        return [e for e in group if e.node.name not in self.down] if self.down else group

    def _fetch_prefill(self, g: int) -> None:
        engines = self.live_engines(self.pe_groups[g])
        if not self.pe_queue or not engines:
            return
        now = self.ctx.timing.now()
        assigned = self.ctx.policy.assign_prefill(self.pe_queue, engines)
        for req, pe in assigned:
            req.pe, req.t_pe = pe, now
            self.de_queue.append(req)
        if assigned:
            self.fetches.kick_every("de")

    def _live_groups(
        self,
    ) -> tuple[Sequence[int], list[list[EngineState]], list[TokenQueue]]:
        """DE groups that have a live engine: (their indices, live engines, private queues)."""
        if not self.down:
            return range(len(self.de_groups)), self.de_groups, self.de_private
        live = [i for i, grp in enumerate(self.de_groups) if self.live_engines(grp)]
        groups = [self.live_engines(self.de_groups[i]) for i in live]
        return live, groups, [self.de_private[i] for i in live]

    def _fetch_decode(self, g: int) -> None:
        if not self.de_queue and not self.de_private[g]:
            return  # nothing to drain and nothing waiting for this group: it assigns nothing
        now = self.ctx.timing.now()
        # groups with no live engine take nothing (their queued requests were sent back)
        live, groups, private = self._live_groups() if self.de_queue else ((), [], [])
        if live:
            for req, k in self.ctx.policy.assign_decode_groups(self.de_queue, groups, private):
                gi = live[k]
                self.de_private[gi].append(req)
                if gi != g:
                    self.fetches.kick("de", [gi])
        engines = self.live_engines(self.de_groups[g])
        if not engines:
            return
        assigned = self.ctx.policy.assign_decode(self.de_private[g], engines)
        for req, de in assigned:
            req.de, req.t_de = de, now
            req.hbm_bytes = float(req.length * self.ctx.kv_token)
            if de.free_hbm < -1e-6:
                raise RuntimeError(f"policy over-committed HBM on {de.engine_id}")
            self.start_read(req)

    def spawn(self, coro: Coroutine[Any, Any, None], req: Request | None = None) -> None:
        """Run `coro` as the scheduler's task: a failure of it ends the run (`fatal`) unless
        `contain` confines it to `req`."""
        task = self.ctx.clock.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._task_done, req))

    def _task_done(self, req: Request | None, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None or (req is not None and self.contain(req, exc)):
            return
        if not self.fatal.done():
            self.fatal.set_exception(exc)

    def contain(self, req: Request, exc: BaseException) -> bool:
        """Seam: may a failure of `req`'s work fail only that request? Here (one process,
        virtual time) every failure is a bug or a verification failure and ends the run; a
        runtime whose requests cross a network fails just the request (and says True)."""
        return False

    # --- the KV read ----------------------------------------------------------------------
    def start_read(self, req: Request) -> None:
        """Seam: read a placed request's hit KV into a DRAM buffer, then hand it to its PE.
        Here: on this process's fabric and store, as callbacks (model/engines/kv_read.py).
        The process runtime overrides it with RPCs to the reading node
        (runtimes/process/serving/remote_scheduler.py); both plan the read and account its
        outcome with the methods below, so the rules live once."""
        KvRead(self, req).start()

    def plan_read(self, req: Request, stored_blocks: int) -> tuple[NodeState, int, float]:
        """Decide what a placed request reads and where (the paper's rules): the hit is the
        stored prefix (all but the last prompt token's block), the side is the policy's
        read-path choice. Returns (reading node, hit blocks, bytes to read)."""
        ctx = self.ctx
        pe, de = req.pe, req.de
        assert pe is not None and de is not None
        hit_blocks = min(stored_blocks, (req.prompt - 1) // ctx.block_tokens)
        req.hit = req.computed = hit_blocks * ctx.block_tokens
        req.persisted_blocks = hit_blocks
        req.path = ctx.policy.choose_path(req, pe.node, de.node)
        if req.path is ReadPath.SPLIT:
            req.path = whole_blocks(req, hit_blocks, ctx.block_tokens)
        req.buffer_bytes = float(req.prompt * ctx.kv_token)
        node = pe.node if req.path is ReadPath.PE else de.node
        return node, hit_blocks, plan_tier(ctx, req, node, hit_blocks)

    def account_read(self, req: Request, hit_blocks: int, nbytes: float, outcome: str) -> None:
        """Record a read's outcome where it was verified: "ok", "missing" or "corrupted"."""
        integ = self.ctx.metrics.integrity
        if req.path is ReadPath.SPLIT:  # counted once as "split"; bytes to the side read
            m, pe_bytes = self.ctx.metrics, nbytes * req.pe_part / req.hit
            m.read_path[req.path.value] += 1
            m.bytes_by_path[ReadPath.PE.value] += pe_bytes
            m.bytes_by_path[ReadPath.DE.value] += nbytes - pe_bytes
        else:
            self.ctx.metrics.record_path(req.path, nbytes)
        if outcome == "missing":
            integ.blocks_lost += 1
        elif outcome == "corrupted":
            integ.blocks_corrupted += 1
        elif hit_blocks:
            integ.blocks_read += hit_blocks
            integ.bytes_from_storage += nbytes

    def storage_target(self, req: Request, hit_blocks: int) -> int:
        """The storage target serving this read, striped by the blocks' chained hash."""
        n = len(self.ctx.hw.targets)
        return self.ctx.chains.target_of(req.session, hit_blocks - 1, n) if n else 0

    def verify_read(self, req: Request, hit_blocks: int, nbytes: float) -> None:
        """Every block is checked where it is consumed; a bad block fails the run loudly."""
        try:
            if hit_blocks:
                self.ctx.store.read_verified(BlockRange(req.session, 0, hit_blocks))
        except BlockMissing:
            self.account_read(req, hit_blocks, nbytes, "missing")
            raise
        except BlockCorrupted:
            self.account_read(req, hit_blocks, nbytes, "corrupted")
            raise
        self.account_read(req, hit_blocks, nbytes, "ok")
