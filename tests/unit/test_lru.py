"""The TTL-bounded LRU map the Schema Registry client keeps schemas in: order and expiry on a
fake clock."""

from __future__ import annotations

import pytest
from embedstream.core.lru import TtlLru


def test_the_least_recently_used_entry_goes_first() -> None:
    lru: TtlLru[str, int] = TtlLru(max_items=2, ttl_s=0)
    lru.put("a", 1, now=0)
    lru.put("b", 2, now=0)
    assert lru.get("a", now=0) == 1  # now "b" is the least recently used
    lru.put("c", 3, now=0)
    assert (lru.get("a", 0), lru.get("b", 0), lru.get("c", 0)) == (1, None, 3)
    assert len(lru) == 2


@pytest.mark.parametrize(
    ("ttl_s", "age_s", "kept"),
    [(10.0, 9.999, True), (10.0, 10.0, False), (10.0, 11.0, False), (0.0, 1e9, True)],
)
def test_entries_expire_after_the_ttl(ttl_s: float, age_s: float, kept: bool) -> None:
    lru: TtlLru[str, int] = TtlLru(max_items=10, ttl_s=ttl_s)
    lru.put("a", 1, now=100.0)
    assert (lru.get("a", now=100.0 + age_s) == 1) is kept


def test_storing_again_restarts_the_ttl() -> None:
    lru: TtlLru[str, int] = TtlLru(max_items=10, ttl_s=10.0)
    lru.put("a", 1, now=0)
    lru.put("a", 2, now=8)
    assert lru.get("a", now=15) == 2
    assert lru.get("a", now=18) is None
    assert len(lru) == 0  # an expired entry is dropped when found


def test_a_memory_tier_of_no_items_is_refused() -> None:
    with pytest.raises(ValueError, match="max_items"):
        TtlLru(max_items=0, ttl_s=1)
