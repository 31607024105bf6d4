"""Micro-benchmark of the fabric on the virtual clock: flows per wall second.

A small DualPath-shaped cluster (per node: SNIC rx/tx, one half-duplex DRAM; per GPU: CNIC
rx/tx with the paper's VL arbitration; one storage service link each way) carries a steady
mix of storage reads, persists, layer KV transfers, H2D/D2H loopbacks and VL0 model traffic.
`concurrency` closed-loop workers each start a new flow when their previous one completes, so
the number of active flows stays fixed. Run: `python -m dualpath.bench.links`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.links.arbitration import paper_cnic_arbitration
from dualpath.model.links.fabric import Fabric
from dualpath.model.links.link import Link

GB = 1e9
KV_VL, MODEL_VL = 2, 0


def _build(fabric: Fabric, nodes: int, gpus: int) -> dict[str, list[Link]]:
    arb = paper_cnic_arbitration()
    topo: dict[str, list[Link]] = {"snic_rx": [], "snic_tx": [], "dram": [], "tx": [], "rx": []}
    for n in range(nodes):
        topo["snic_rx"].append(fabric.add_link(f"n{n}.snic.rx", 50 * GB))
        topo["snic_tx"].append(fabric.add_link(f"n{n}.snic.tx", 50 * GB))
        topo["dram"].append(fabric.add_link(f"n{n}.dram", 500 * GB))
        for g in range(gpus):
            topo["tx"].append(fabric.add_link(f"n{n}.g{g}.cnic.tx", 50 * GB, arb))
            topo["rx"].append(fabric.add_link(f"n{n}.g{g}.cnic.rx", 50 * GB, arb))
    topo["store_out"] = [fabric.add_link("storage.out", 10_000 * GB)]
    topo["store_in"] = [fabric.add_link("storage.in", 10_000 * GB)]
    return topo


def _pick_flow(
    rng: random.Random, topo: dict[str, list[Link]], nodes: int, gpus: int
) -> tuple[float, list[Link], int]:
    """One transfer of the DualPath mix: (bytes, hops, VL)."""
    n = rng.randrange(nodes)
    g = n * gpus + rng.randrange(gpus)
    peer = rng.randrange(nodes * gpus)
    while peer // gpus == n and nodes > 1:
        peer = rng.randrange(nodes * gpus)
    kind = rng.random()
    size = rng.expovariate(1.0 / (8e6 if kind < 0.8 else 64e6))
    if kind < 0.25:  # storage read into the node's DRAM buffer
        return size, [topo["store_out"][0], topo["snic_rx"][n], topo["dram"][n]], 0
    if kind < 0.35:  # persist a finished block
        return size, [topo["dram"][n], topo["snic_tx"][n], topo["store_in"][0]], 0
    if kind < 0.65:  # layer KV: DE buffer -> DE CNIC -> PE CNIC
        return size, [topo["dram"][n], topo["tx"][g], topo["rx"][peer]], KV_VL
    if kind < 0.85:  # H2D through the CNIC loopback
        return size, [topo["dram"][n], topo["tx"][g], topo["rx"][g]], KV_VL
    return size / 8, [topo["tx"][g], topo["rx"][peer]], MODEL_VL  # EP all-to-all piece


def bench_fabric(
    n_flows: int = 200_000, concurrency: int = 200, nodes: int = 16, gpus: int = 8, seed: int = 0
) -> dict[str, Any]:
    """Push `n_flows` through the fabric and report wall throughput and fabric counters."""
    rng = random.Random(seed)

    async def main(clock: VirtualClock) -> dict[str, Any]:
        fabric = Fabric(clock, bucket_s=1.0)
        topo = _build(fabric, nodes, gpus)
        budget = [n_flows]
        finished = clock.create_future()

        def worker() -> Callable[[], None]:
            def next_flow() -> None:
                if budget[0] <= 0:
                    if fabric.active_flows == 0 and not finished.done():
                        finished.set_result(None)
                    return
                budget[0] -= 1
                size, hops, vl = _pick_flow(rng, topo, nodes, gpus)
                fabric.start(size, hops, vl, next_flow)

            return next_flow

        wall0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(concurrency):
            worker()()
        await finished
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        return {
            "flows": fabric.flows_completed,
            "wall_s": wall,
            "flows_per_s": fabric.flows_completed / wall,
            "flows_per_cpu_s": fabric.flows_completed / cpu,
            "emulated_s": clock.now(),
            "links": len(fabric.links),
            "concurrency": concurrency,
            "relax_steps_per_flow": fabric.relax_steps / max(1, fabric.flows_started),
            "reshares_per_flow": fabric.relaxes / max(1, fabric.flows_started),
            "cascade_truncations": fabric.cascade_truncations,
        }

    result: dict[str, Any] = run_virtual(main)
    return result


if __name__ == "__main__":
    for key, value in bench_fabric().items():
        print(f"{key:>22}: {value:.4g}" if isinstance(value, float) else f"{key:>22}: {value}")
