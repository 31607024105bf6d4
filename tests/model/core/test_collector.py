"""GC pacing of virtual runs (model/core/collector.py): slower inside, restored after, even on
error."""

from __future__ import annotations

import gc

import pytest

from dualpath.model.core.collector import SPARSE_GEN0, sparse_collection


def test_young_threshold_is_raised_inside_and_restored_after() -> None:
    before = gc.get_threshold()
    with sparse_collection():
        inside = gc.get_threshold()
    assert inside[0] == max(SPARSE_GEN0, before[0])
    assert inside[1:] == before[1:]
    assert gc.get_threshold() == before


def test_threshold_is_restored_when_the_run_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), sparse_collection(gen0=before[0] + 1):
        assert gc.get_threshold()[0] == before[0] + 1
        raise RuntimeError("run failed")
    assert gc.get_threshold() == before


def test_collection_stays_on_inside() -> None:
    """Cycles are still freed: pacing, not disabling."""
    with sparse_collection():
        assert gc.isenabled()
