"""The demo agent workload of `dualpath run`, driven through the HTTP front door exactly
as an external client would (the native agent-turn endpoint)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from dualpath.workload import Trajectory


class WorkloadError(RuntimeError):
    """The cluster refused or failed a turn: the message carries the server's reason."""


async def drive_agents(
    http_addr: str,
    trajs: Sequence[Trajectory],
    on_turn: Callable[[], None],
    turn_timeout_s: float,
) -> list[dict[str, Any]]:
    """Every agent starts at once and runs its turns back to back (offline mode, as
    `dualpath sim`); returns the per-turn answers."""
    url = f"http://{http_addr}/v1/agent/turn"
    results: list[dict[str, Any]] = []
    timeout = aiohttp.ClientTimeout(total=turn_timeout_s)
    conn = aiohttp.TCPConnector(limit=0)  # one connection per agent: turns are long-lived

    async def agent(session: aiohttp.ClientSession, traj: Trajectory) -> None:
        for i, turn in enumerate(traj.turns):
            body = {
                "session": f"agent-{traj.agent_id}",
                "turn": i,
                "append_tokens": int(turn.append),
                "gen_tokens": int(turn.gen),
            }
            async with session.post(url, json=body) as resp:
                data = await resp.json(content_type=None)
                if resp.status != 200:
                    msg = (
                        data.get("error", {}).get("message", data)
                        if isinstance(data, dict)
                        else data
                    )
                    raise WorkloadError(
                        f"agent {traj.agent_id} turn {i}: HTTP {resp.status}: {msg}"
                    )
            results.append(data)
            on_turn()

    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as session:
        await asyncio.gather(*(agent(session, t) for t in trajs))
    return results
