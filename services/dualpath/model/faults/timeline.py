"""A fault schedule as a timeline of starts and ends, stepped by whoever applies it (the
launcher's signals, the docker SDK). Pure: no clock of its own; `due(now)` takes one."""

from __future__ import annotations

from collections.abc import Iterator

from dualpath.model.faults.spec import Fault


class Timeline:
    def __init__(self, faults: list[Fault]) -> None:
        self._due: list[tuple[float, bool, Fault]] = []
        for f in faults:
            self._due.append((f.at_s, True, f))
            if f.for_s:
                self._due.append((f.end_s, False, f))
        self._due.sort(key=lambda d: (d[0], d[1]))  # an end before a start at the same t

    def __len__(self) -> int:
        return len(self._due)

    def next_at(self) -> float | None:
        """Emulated time of the next start or end (None: nothing left)."""
        return self._due[0][0] if self._due else None

    def due(self, now: float) -> Iterator[tuple[bool, Fault]]:
        """(is a start, fault) for every start or end due at emulated time `now`, in order."""
        while self._due and self._due[0][0] <= now:
            _, start, f = self._due.pop(0)
            yield start, f

    def drop_all(self) -> list[tuple[bool, Fault]]:
        """Forget what is left (an interrupted run); returns it."""
        left = [(start, f) for _, start, f in self._due]
        self._due.clear()
        return left
