"""runtimes/process/serving/scheduler.py, in process: the registry as the failure detector (a node
missing
from it is lost, a node back is placed on again, a node with a new pid lost its turns) and
the refusals of a new turn before it is queued."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dualpath.model.core.clock import RealClock
from dualpath.model.entities.request import EngineState, Request
from dualpath.runtimes.process.control import Member
from dualpath.runtimes.process.frontdoor import BackendBusy, BackendUnavailable, BadTurn, TurnSpec
from dualpath.runtimes.process.serving.events import EventSink
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.scheduler import SchedulerShell, scheduler_world
from tests.runtimes.process.serving.conftest import scenario

NODES = ("decode0", "decode1", "prefill0")


class Events(EventSink):
    """Keeps what the shell emits (the real sink writes it to the run's Redis stream)."""

    def __init__(self) -> None:
        self.kinds: list[tuple[str, str]] = []

    def emit(self, kind: str, t: float, **fields: Any) -> None:
        self.kinds.append((kind, fields.get("name", "")))

    async def close(self) -> None:
        pass


def _run(test: Callable[[SchedulerShell, Events], Awaitable[None]], **opts: Any) -> None:
    async def main() -> None:
        clock = RealClock()
        serve = ServeOptions(role="scheduler", redis_url="redis://127.0.0.1:1/0", **opts)
        world = scheduler_world(scenario("topology.decode_nodes=2"), clock, serve)
        events = Events()
        shell = SchedulerShell(serve, world, clock, events)
        try:
            await test(shell, events)
        finally:
            await shell.stop()

    asyncio.run(main())


def _members(*names: str, pid: str = "1") -> list[Member]:
    role = {"d": "decode", "p": "prefill", "s": "storage"}
    return [Member(role[n[0]], n, "127.0.0.1:1", "127.0.0.1:2", {"pid": pid}) for n in names]


def _place_on(shell: SchedulerShell, req: Request, node: str) -> EngineState:
    de = next(e for g in shell.sched.de_groups for e in g if e.node.name == node)
    shell.sched.ctx.policy.take_decode(req, de)
    req.de = de
    return de


def test_a_node_missing_from_the_registry_is_lost_and_placed_on_again_when_back() -> None:
    async def test(shell: SchedulerShell, events: Events) -> None:
        shell.on_members(_members(*NODES, "storage"))
        assert shell.lost == set() and not shell.sched.down and events.kinds == []
        shell.on_members(_members("decode0", "prefill0", "storage"))
        assert shell.lost == {"decode1"} and "decode1" in shell.sched.down
        assert shell.health()["lost"] == ["decode1"]
        assert events.kinds == [("engine_lost", "decode1")]
        shell.on_members(_members(*NODES, "storage"))
        assert shell.lost == set() and not shell.sched.down
        assert events.kinds[-1] == ("engine_back", "decode1")

    _run(test)


def test_a_node_back_with_a_new_pid_lost_its_turns() -> None:
    """Restarted within its lease it never looks absent, but its predecessor's turns
    died with it: they are placed again (a new attempt). The new process is placed on
    after one lease, when every service calls its new address."""

    async def test(shell: SchedulerShell, events: Events) -> None:
        shell.on_members(_members(*NODES, "storage"))
        shell.ready = True
        req = shell._admit(TurnSpec(session=1, turn=0, prompt_tokens=1000, gen_tokens=8))
        de = _place_on(shell, req, "decode1")  # as if placed there, before its read started
        shell.on_members(_members("decode0", "prefill0", "storage") + _members("decode1", pid="2"))
        assert events.kinds == [("engine_restarted", "decode1")]
        assert req.attempt == 1 and req.de is None and shell.sched.replaced == 1
        assert de.seq == 0 and shell.sched.pe_queue[0] is req  # freed there, queued again
        assert shell.sched.down == {"decode1"} and shell.lost == set()
        assert not shell.sched.lost_nodes, "the new process's tier reports count"
        renewed = _members("decode0", "prefill0", "storage") + _members("decode1", pid="2")
        shell.on_members(renewed)  # within the lease: still not placed on
        assert shell.sched.down == {"decode1"}
        shell.sched.suspects["decode1"] -= serve_lease(shell) + 0.1  # one lease later
        shell.on_members(renewed)
        assert not shell.sched.down and not shell.sched.suspects
        assert events.kinds == [("engine_restarted", "decode1")]
        shell.sched.fail_request(req, RuntimeError("test over"))
        assert isinstance(req.done.exception(), RuntimeError)

    _run(test)


def test_a_lost_node_back_as_a_new_process_waits_one_lease() -> None:
    """Absent from the registry, then back with a new pid (at a new address the other
    services learn at their next read): placed on after one lease. Back with the same
    pid (the process lives; its heartbeat was late): at once."""

    async def test(shell: SchedulerShell, events: Events) -> None:
        shell.on_members(_members(*NODES, "storage"))
        shell.on_members(_members("decode0", "prefill0", "storage"))
        assert "decode1" in shell.sched.down
        renewed = _members("decode0", "prefill0", "storage") + _members("decode1", pid="2")
        shell.on_members(renewed)
        assert events.kinds == [("engine_lost", "decode1"), ("engine_back", "decode1")]
        assert shell.sched.down == {"decode1"} and "decode1" in shell.sched.suspects
        shell.sched.suspects["decode1"] -= serve_lease(shell) + 0.1
        shell.on_members(renewed)
        assert not shell.sched.down
        shell.on_members(_members("decode0", "prefill0", "storage"))  # late, same pid
        shell.on_members(renewed)
        assert not shell.sched.down and not shell.sched.suspects

    _run(test)


def serve_lease(shell: SchedulerShell) -> float:
    return shell.opts.heartbeat_ttl_s * shell.clock.dilation


def test_a_new_turn_is_refused_before_it_is_queued() -> None:
    spec = TurnSpec(session=1, turn=0, prompt_tokens=1000, gen_tokens=8)

    async def test(shell: SchedulerShell, events: Events) -> None:
        with pytest.raises(BackendUnavailable, match="not serving yet"):
            shell._admit(spec)
        shell.ready = True
        req = shell._admit(spec)
        with pytest.raises(BackendBusy, match="1 turns in flight"):
            shell._admit(TurnSpec(session=2, turn=0, prompt_tokens=1000, gen_tokens=8))
        shell.sched.fail_request(req, RuntimeError("test over"))
        assert isinstance(req.done.exception(), RuntimeError)
        huge = TurnSpec(session=3, turn=0, prompt_tokens=10**9, gen_tokens=8)
        with pytest.raises(BadTurn, match=r"workload\.max_len"):
            shell._admit(huge)
        assert not shell.sched.inflight and not shell.sched.pe_queue

    _run(test, max_inflight=1)
