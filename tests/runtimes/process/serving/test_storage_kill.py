"""No KV lost to a storage kill (docs/faults.md, "Storage restart"): the storage SIGKILLed
right after a fresh turn's answer, started again, and the same prompt hits every block but
its last partial one. Before the fix it hit 0 of 6,013 tokens: the write had been
acknowledged, but the block index reached Redis only 0.1 s later (write-behind)."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import openai
import pytest

from dualpath.runtimes.process.launcher.collect import gather_stats
from dualpath.runtimes.process.launcher.local import LocalCluster
from tests.polling import wait_until

pytestmark = pytest.mark.slow

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]


def _storage(cl: LocalCluster, addrs: dict[str, str]) -> dict[str, Any]:
    stats = asyncio.run(gather_stats({"storage": addrs["storage"]}))
    store: dict[str, Any] = stats[0]["store"]
    return store


def test_a_storage_killed_right_after_an_answer_keeps_the_turns_blocks(
    fresh_cluster: LocalCluster,
) -> None:
    cl = fresh_cluster
    prompt = "".join(f" {WORDS[(i * 7) % len(WORDS)]}" for i in range(6006))

    def ask() -> tuple[int, int]:
        client = openai.OpenAI(base_url=f"http://{cl.http_addr}/v1", api_key="x", max_retries=0)
        r = client.chat.completions.create(
            model="ds-27b", messages=[{"role": "user", "content": prompt}], max_tokens=1
        )
        assert r.usage is not None and r.usage.prompt_tokens_details is not None
        return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens or 0

    prompt_tokens, cached = ask()  # one token: the answer leaves as the persist starts
    storage = next(p for p in cl.group.procs if p.name == "storage")
    cl.group.hold("storage")
    os.kill(storage.popen.pid, signal.SIGKILL)
    storage.popen.wait(timeout=10)
    assert cached == 0 and prompt_tokens > 6000
    cl.group.respawn("storage")
    addrs = cl.settle()
    bt = cl.sc.engine.block_tokens
    full = (prompt_tokens - 1) // bt  # the last prompt token's block is never a hit
    # Either the write was acknowledged (then it is in the restored index) or it was in
    # flight (then decode0 sends it again to the new storage): both end with every block.
    wait_until(
        lambda: _storage(cl, addrs)["stored_blocks"] >= full,
        timeout=30,
        interval=0.25,
        what=f"the restarted storage to hold the turn's {full} blocks",
    )

    def hit() -> tuple[int] | None:
        """The same prompt's hit (asked once: a second ask would hit what the first one
        persisted), or None while the scheduler still calls the old storage address (it
        reads the registry every TTL/2)."""
        try:
            return (ask()[1],)
        except openai.APIStatusError:
            return None

    (again,) = wait_until(hit, timeout=20, interval=0.25, what="the prompt again")
    assert again == full * bt, (again, full * bt)
