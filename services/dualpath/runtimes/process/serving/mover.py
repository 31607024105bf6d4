"""The process runtime's transport: a transfer charges every hop in the process that owns
it and completes when the slowest owner is done (docs/services.md, "Links across processes").

Link names start with their owner ("prefill0.gpu1.cnic.rx" belongs to `prefill0`,
"storage.write" to `storage`). Local hops move as one fluid flow on this process's fabric;
each remote owner gets one `Charge` RPC for its hops, started at the same moment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import grpc

from dualpath.model.links import Fabric, Link

log = logging.getLogger(__name__)
PEER_GONE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
)

ChargeFn = Callable[[str, list[str], float, int], Awaitable[None]]


def owner_of(link_name: str) -> str:
    return link_name.split(".", 1)[0]


class DistributedMover:
    def __init__(
        self,
        me: str,
        fabric: Fabric,
        charge: ChargeFn,
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.me = me
        self.fabric = fabric
        self._charge = charge
        self._on_error = on_error
        self._tasks: set[asyncio.Task[None]] = set()
        self.remote_charges = 0
        self.charges_lost = 0  # charges whose owner was gone (killed, hung past the deadline)

    def split(self, hops: Sequence[Link]) -> tuple[list[Link], dict[str, list[str]]]:
        local: list[Link] = []
        remote: dict[str, list[str]] = {}
        for h in hops:
            owner = owner_of(h.name)
            if owner == self.me:
                local.append(h)
            else:
                remote.setdefault(owner, []).append(h.name)
        return local, remote

    def start(
        self, nbytes: float, hops: list[Link], vl: int, on_done: Callable[[], None] | None = None
    ) -> None:
        local, remote = self.split(hops)
        left = (1 if local else 0) + len(remote)

        def part_done() -> None:
            nonlocal left
            left -= 1
            if left == 0 and on_done is not None:
                on_done()

        if left == 0:
            if on_done is not None:
                asyncio.get_running_loop().call_soon(on_done)
            return
        if local:
            self.fabric.start(nbytes, local, vl, part_done)
        for owner, names in remote.items():
            self.remote_charges += 1
            task = asyncio.get_running_loop().create_task(
                self._remote(owner, names, nbytes, vl, part_done)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _remote(
        self, owner: str, names: list[str], nbytes: float, vl: int, done: Callable[[], None]
    ) -> None:
        try:
            await self._charge(owner, names, nbytes, vl)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in PEER_GONE:
                self._on_error(exc)  # the peer refused the charge: a bug, end the run
                return
            # The owner died or hangs: its links carry nothing now. This process's part
            # goes on; the turn that needed the peer fails (or is placed again) where it
            # meets the peer next (the hand-over), never this node.
            self.charges_lost += 1
            log.warning("charge on %s lost: %s", owner, exc.code().name)
        except BaseException as exc:  # a bug in the transfer must end the run, not hang it
            self._on_error(exc)
            return
        done()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
