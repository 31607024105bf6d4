"""runtimes/process/serving/peers.py: which channel a peer is called on after it moves or
restarts."""

from __future__ import annotations

import asyncio

from dualpath.runtimes.process.control import Member
from dualpath.runtimes.process.serving.peers import Peers


def _member(addr: str, pid: str) -> Member:
    return Member("decode", "decode0", addr, "127.0.0.1:2", {"pid": pid})


def test_a_restarted_peer_gets_a_fresh_channel_even_at_the_same_address() -> None:
    async def main() -> None:
        peers = Peers()
        peers.update([_member("127.0.0.1:5001", "1")])
        first = peers._channel("decode0")
        peers.update([_member("127.0.0.1:5001", "1")])  # every read of the registry
        assert peers._channel("decode0") is first
        peers.update([_member("127.0.0.1:5001", "2")])  # restarted where it was
        second = peers._channel("decode0")
        assert second is not first
        peers.update([_member("127.0.0.1:5002", "2")])  # moved
        assert peers._channel("decode0") not in (first, second)
        assert len(peers._retired) == 2
        await peers.close()
        assert not peers._retired and not peers._channels

    asyncio.run(main())
