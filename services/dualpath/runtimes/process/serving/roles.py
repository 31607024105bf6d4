"""Which shell each role runs (the composition roots of the service processes)."""

from __future__ import annotations

from dualpath.runtimes.process.serving.host import ShellFactory


def factory(role: str) -> ShellFactory:
    if role == "storage":
        from dualpath.runtimes.process.serving.storage import make_storage

        return make_storage
    if role in ("prefill", "decode"):
        from dualpath.runtimes.process.serving.node import make_node

        return make_node
    if role == "scheduler":
        from dualpath.runtimes.process.serving.scheduler import make_scheduler

        return make_scheduler
    raise ValueError(f"ROLE: unknown role {role!r}; accepted: scheduler, storage, prefill, decode")
