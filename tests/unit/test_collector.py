"""The processor's garbage collector: start's objects frozen, young collections rarer, both
as they were once the block ends (nested uses leave it to the outermost)."""

from __future__ import annotations

import gc

import pytest
from embedstream.ops.collector import YOUNG_THRESHOLD, collector_for_throughput


@pytest.fixture(autouse=True)
def _defaults() -> object:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_frozen_and_rarer_inside_as_before_after() -> None:
    assert gc.get_freeze_count() == 0
    with collector_for_throughput():
        assert gc.get_freeze_count() > 0  # what exists at the start is never walked again
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_higher_threshold_already_set_is_kept() -> None:
    gc.set_threshold(100_000, 20, 30)
    with collector_for_throughput():
        assert gc.get_threshold() == (100_000, 20, 30)
    assert gc.get_threshold() == (100_000, 20, 30)


def test_nested_uses_leave_the_restore_to_the_outermost() -> None:
    with collector_for_throughput():
        with collector_for_throughput():
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the outer block still runs
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), collector_for_throughput():
        raise RuntimeError("stopped")
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
