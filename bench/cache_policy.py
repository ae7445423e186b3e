"""The in-process cache's hit ratio on a re-ingest, before (LRU) and after (W-TinyLFU).

    PYTHONPATH=stream python bench/cache_policy.py [--slots 10319] [--corpus 20638]
                                                   [--dimensions 1536] [--resend-distance 2000]

Counts, not times: both policies see the same keys (cache keys as the processor makes them, a
vector of `--dimensions` float32 each) and the figures are the share of look-ups answered.
`reingest`: the corpus once, then again in the same order (the edit pass of a corpus larger
than the cache); at best `slots / corpus` of the second pass can hit. `resend`: a stream of
20 x slots new texts, each sent again `--resend-distance` texts later (an upstream retry),
over the stream's first fifth and over its second half: what a frequency-based policy gives
up for scan resistance until its window has grown to the workload. The "after" tier has the
defaults' byte bound too (`cache_max_bytes`), and by default as many slots as that bound keeps
(`memory_tier_entries`: the entries of 1536 dimensions it holds); the corpus, twice that.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from embedstream.core.cachekeys import cache_key
from embedstream.core.lanes import BucketKey, Priority
from embedstream.core.lru import TtlLru
from embedstream.core.tinylfu import TinyLfuCache
from embedstream.engine.cache_tiers import entry_bytes, memory_tier_entries
from embedstream.settings import Settings

Tier = TtlLru[str, bytes] | TinyLfuCache[str, bytes]


def _key(i: int) -> str:
    return cache_key("bench", BucketKey(Priority.LOW, "m", "float", None), f"text {i}")


def reingest(tier: Tier, corpus: int, vector: bytes) -> float:
    keys = [_key(i) for i in range(corpus)]
    hits = 0
    for _ in range(2):
        hits = 0
        for key in keys:
            if tier.get(key, 0.0) is None:
                tier.put(key, vector, 0.0)
            else:
                hits += 1
    return hits / corpus


def resend(tier: Tier, texts: int, distance: int, vector: bytes) -> tuple[float, float]:
    """The hit ratio of the re-sends over the first fifth of the stream, and over its last half
    (once the W-TinyLFU window has been resized to the workload)."""
    early = texts // 5
    hits = {"early": 0, "late": 0}
    for i in range(texts):
        key = _key(i)
        if tier.get(key, 0.0) is None:
            tier.put(key, vector, 0.0)
        if i >= distance and tier.get(_key(i - distance), 0.0) is not None:
            if i < early:
                hits["early"] += 1
            elif i >= texts // 2:
                hits["late"] += 1
    return hits["early"] / (early - distance), hits["late"] / (texts - texts // 2)


def main(argv: Sequence[str] | None = None) -> None:
    defaults = Settings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    slots = memory_tier_entries(defaults.cache_max_bytes)
    parser.add_argument("--slots", type=int, default=slots)
    parser.add_argument("--max-bytes", type=int, default=defaults.cache_max_bytes)
    parser.add_argument("--corpus", type=int, default=2 * slots)
    parser.add_argument("--dimensions", type=int, default=1536)
    parser.add_argument("--resend-distance", type=int, default=2_000)
    args = parser.parse_args(argv)
    vector = bytes(4 * args.dimensions)
    tiers: dict[str, Callable[[], Tier]] = {
        "before (LRU)": lambda: TtlLru(args.slots, 0),
        "after (W-TinyLFU)": lambda: TinyLfuCache(args.slots, args.max_bytes, 0, entry_bytes),
    }
    print(
        f"{args.slots:,} slots, {args.max_bytes:,} bytes (after only), "
        f"{args.dimensions} dimensions; hit ratio of the look-ups"
    )
    print(f"{'policy':<20} {'reingest ' + format(args.corpus, ','):>18} "
          f"{'resend, first':>14} {'resend, later':>14}")  # fmt: skip
    for name, make in tiers.items():
        again = reingest(make(), args.corpus, vector)
        early, late = resend(make(), 20 * args.slots, args.resend_distance, vector)
        print(f"{name:<20} {again:>18.1%} {early:>14.1%} {late:>14.1%}")


if __name__ == "__main__":
    main()
