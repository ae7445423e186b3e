"""The in-process tier's policy (core/tinylfu.py): a re-ingest in the same order still hits,
a re-send soon after hits once the window has grown, both bounds hold (entries and bytes,
vectors counted), the TTL on a fake clock."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from embedstream.core import tinylfu
from embedstream.core.lru import TtlLru
from embedstream.core.tinylfu import TinyLfuCache
from embedstream.engine.cache_tiers import ENTRY_OVERHEAD_BYTES, MemoryTier, entry_bytes
from hypothesis import given
from hypothesis import strategies as st

SLOTS = 10_000
CORPUS = 20_000  # twice the slots: the re-ingest a least-recently-used map answers none of


class Policy:
    """What both policies offer the test: look up, and store on a miss."""

    def __init__(self, cache: TinyLfuCache[str, bytes] | TtlLru[str, bytes]) -> None:
        self.cache = cache

    def second_pass_hit_ratio(self, keys: list[str]) -> float:
        hits = 0
        for _ingest in range(2):
            hits = 0
            for key in keys:
                if self.cache.get(key, 0.0) is None:
                    self.cache.put(key, b"v" * 8, 0.0)
                else:
                    hits += 1
        return hits / len(keys)


def by_count(_key: object, _value: object) -> int:
    return 1


def test_a_cyclic_reingest_twice_the_size_of_the_cache_hits_about_half() -> None:
    keys = [f"chunk-{i}" for i in range(CORPUS)]
    lru = Policy(TtlLru(SLOTS, 0)).second_pass_hit_ratio(keys)
    tinylfu = Policy(TinyLfuCache(SLOTS, SLOTS, 0, by_count)).second_pass_hit_ratio(keys)
    assert lru == 0.0  # what the old tier did: every chunk paid for again
    # At best SLOTS of CORPUS can hit (0.5); the window (1%) is what stays of the rest.
    assert 0.48 <= tinylfu <= 0.5


def test_the_byte_bound_counts_the_vectors_and_still_resists_the_scan() -> None:
    keys = [f"chunk-{i}" for i in range(CORPUS)]
    vector = 1536 * 4
    fits = SLOTS // 2  # the bytes hold half the entries the item bound allows
    tier: TinyLfuCache[str, bytes] = TinyLfuCache(SLOTS, fits * vector, 0, lambda _k, v: len(v))
    hits = 0
    for _ingest in range(2):
        hits = 0
        for key in keys:
            if tier.get(key, 0.0) is None:
                tier.put(key, bytes(vector), 0.0)
            else:
                hits += 1
        assert tier.weight <= fits * vector
        assert len(tier) <= fits
    assert 0.23 <= hits / CORPUS <= 0.25


def test_the_window_grows_until_texts_resent_soon_after_hit_again() -> None:
    """An upstream retry: each new text is sent again 200 texts later, farther than the first
    window (10 of 1,000 slots) reaches: the climber grows it until every re-send hits.

    Integer keys: a string's hash changes with each process's hash seed, and with it the
    sketch's collisions and the climber's path; for about one seed in twenty the climber
    settles on a window too small (a known limit of the hill climber, not yet fixed)."""
    tier: TinyLfuCache[int, int] = TinyLfuCache(1_000, 10**9, 0, by_count)
    texts, distance, late_hits = 30_000, 200, 0
    early_hits = 0
    for i in range(texts):
        if tier.get(i, 0.0) is None:
            tier.put(i, i, 0.0)
        if i >= distance and tier.get(i - distance, 0.0) is not None:
            if i < 3_000:
                early_hits += 1
            elif i >= texts // 2:
                late_hits += 1
    assert early_hits / (3_000 - distance) < 0.5  # the first window was too small
    assert late_hits / (texts - texts // 2) == 1.0
    assert tier.window_share > 0.2 and len(tier) <= 1_000


def test_an_entry_asked_for_again_wins_its_place_over_one_asked_for_once() -> None:
    tier: TinyLfuCache[str, int] = TinyLfuCache(
        max_items=100, max_weight=10**9, ttl_s=0, weigh=by_count
    )
    for i in range(100):  # fills the window and the main area
        tier.get(f"old-{i}", 0.0)
        tier.put(f"old-{i}", i, 0.0)
    tier.get("popular", 0.0)
    tier.get("popular", 0.0)
    tier.put("popular", -1, 0.0)
    tier.put("pusher", -2, 0.0)  # pushes "popular" out of the window: it contests "old-0"
    assert tier.get("popular", 0.0) == -1
    assert tier.get("old-0", 0.0) is None
    assert len(tier) == 100


def test_an_entry_over_the_whole_byte_bound_is_not_kept() -> None:
    tier: TinyLfuCache[str, bytes] = TinyLfuCache(
        max_items=10, max_weight=100, ttl_s=0, weigh=lambda _k, v: len(v)
    )
    assert tier.put("huge", b"x" * 101, 0.0) == 0
    assert tier.get("huge", 0.0) is None
    assert tier.weight == 0


@pytest.mark.parametrize(
    ("ttl_s", "age_s", "kept"),
    [(10.0, 9.999, True), (10.0, 10.0, False), (10.0, 11.0, False), (0.0, 1e9, True)],
)
def test_entries_expire_after_the_ttl(ttl_s: float, age_s: float, kept: bool) -> None:
    tier: TinyLfuCache[str, int] = TinyLfuCache(
        max_items=10, max_weight=100, ttl_s=ttl_s, weigh=by_count
    )
    tier.put("a", 1, now=100.0)
    assert (tier.get("a", now=100.0 + age_s) == 1) is kept


def test_storing_again_replaces_the_value_and_restarts_the_ttl() -> None:
    tier: TinyLfuCache[str, int] = TinyLfuCache(
        max_items=10, max_weight=100, ttl_s=10.0, weigh=by_count
    )
    tier.put("a", 1, now=0)
    tier.put("a", 2, now=8)
    assert tier.get("a", now=15) == 2
    assert tier.get("a", now=18) is None
    assert len(tier) == 0 and tier.weight == 0  # an expired entry is dropped when found


@pytest.mark.parametrize(("items", "weight"), [(0, 10), (10, 0)])
def test_a_tier_of_nothing_is_refused(items: int, weight: int) -> None:
    with pytest.raises(ValueError, match="must be at least 1"):
        TinyLfuCache(items, weight, 0, by_count)


async def test_the_memory_tier_counts_each_vector_and_key_against_its_bytes() -> None:
    key, vector = "k" * 79, bytes(1536 * 4)
    assert entry_bytes(key, vector) == 79 + 6144 + ENTRY_OVERHEAD_BYTES
    room = 3 * entry_bytes(key, vector)
    tier = MemoryTier(0, max_bytes=room)
    await tier.put_many([(f"{i:079d}", vector) for i in range(10)])
    assert len(tier) == 3
    assert tier.bytes_held <= room


@given(
    st.integers(1, 8),
    st.integers(1, 60),
    st.lists(st.tuples(st.booleans(), st.integers(0, 12), st.integers(1, 20)), max_size=200),
)
def test_both_bounds_hold_and_a_hit_is_the_last_value_stored(
    max_items: int, max_weight: int, operations: list[tuple[bool, int, int]]
) -> None:
    with patch.object(tinylfu, "MIN_SAMPLE", 1):  # the window is resized every few look-ups
        tier: TinyLfuCache[int, int] = TinyLfuCache(max_items, max_weight, 0, lambda _k, v: v)
    stored: dict[int, int] = {}
    for is_put, key, value in operations:
        if is_put:
            tier.put(key, value, 0.0)
            stored[key] = value
        else:
            found = tier.get(key, 0.0)
            assert found is None or found == stored[key]
        assert len(tier) <= max_items
        assert tier.weight <= max_weight
