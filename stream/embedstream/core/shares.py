"""Fair shares between the sources of one lane: buffer space and calls, by weight.

A source is an input topic (the unit Kafka can pause; records inside one partition cannot be
reordered). When several sources of a lane have work, each is entitled to a share of the
lane's buffer in proportion to its weight (`source_weights`, 1 unless set); a source using
less than its share leaves the rest to the others (water-filling), so an idle source costs
nobody anything and a lone source may use the whole lane. Fetching follows the shares: a
source over its share is paused while another source of its lane wants more (hysteresis: it
resumes below half its share). For calls, :func:`share_order` picks the sources of the next
batch's inputs by weighted deficit, so a trickle is served within about one call of a flood.

Pure: no clock, no Kafka; the Kafka shell (`kafka/consumption/fetcher.py`) applies
`sources_to_pause`,
the buckets of `core/lanes.py` apply `share_order` to every call they cut.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence, Set
from typing import TypeVar

S = TypeVar("S", bound=Hashable)

DEFAULT_WEIGHT = 1.0
RESUME_FRACTION = 0.5  # a paused source resumes below this fraction of its share


def weight_of(weights: Mapping[S, float], source: S) -> float:
    return weights.get(source, DEFAULT_WEIGHT)


def buffer_shares(
    demand: Mapping[S, float], weights: Mapping[S, float], capacity: float
) -> dict[S, float]:
    """Each source's share of `capacity`: weighted max-min fairness over `demand` (what each
    would hold if it could). A source wanting less than its weighted part gets what it wants;
    what it leaves is split among the others by weight, and so on."""
    shares: dict[S, float] = {}
    left = dict(demand)
    room = float(capacity)
    while left:
        total_weight = sum(weight_of(weights, s) for s in left)
        unit = room / total_weight
        satisfied = {s: d for s, d in left.items() if d <= unit * weight_of(weights, s)}
        if not satisfied:
            for s in left:
                shares[s] = unit * weight_of(weights, s)
            return shares
        for s, d in satisfied.items():
            shares[s] = float(d)
            room -= d
            del left[s]
    return shares


def sources_to_pause(
    held: Mapping[S, int],
    wanting: Set[S],
    weights: Mapping[S, float],
    capacity: float,
    paused: Set[S],
    reserve: float = 0.0,
) -> set[S]:
    """The sources of one lane to pause so that the others get their shares.

    `held` is each source's buffered items (every source of the lane, idle ones at 0),
    `wanting` the sources with more to fetch (lag). A source is paused when it holds its
    share or more while another source holds less than its own; a source already paused
    stays paused until it is below half its share. A source with nothing to fetch is never
    paused (a trickle between records has no lag); it wants what it holds, or `reserve`
    if more: room kept for its next records, so that a flood on another source never fills
    the lane to its limit (where the lane pauses whole and the trickle waits for half the
    lane to drain). With `reserve` 0 and no other source wanting, nothing is paused here
    (the lane's own limits still apply).
    """
    sources = set(held) | set(wanting)
    # Demand: what is held, and for a source with more to fetch, as much as it could get.
    demand = {
        s: float(capacity) if s in wanting else max(float(held.get(s, 0)), reserve) for s in sources
    }
    shares = buffer_shares(demand, weights, capacity)
    pause: set[S] = set()
    for s in wanting:  # one with nothing to fetch is never paused: its trickle comes in
        others_starved = any(held.get(o, 0) < shares[o] for o in sources if o != s)
        if not others_starved:
            continue
        threshold = shares[s] * (RESUME_FRACTION if s in paused else 1.0)
        if held.get(s, 0) >= threshold and held.get(s, 0) > 0:
            pause.add(s)
    return pause


def share_order(
    queued: Sequence[tuple[S, int]],
    levels: Mapping[S, float],
    weights: Mapping[S, float],
    limit: int,
) -> list[S]:
    """The sources of the next `limit` inputs, in the order they are taken: each input goes
    to the source with the lowest level (inputs it was given, divided by its weight), among
    those with inputs left in `queued`; ties go to the source listed first (the caller lists
    the oldest first). `levels` are the sources' levels now (0 unless given).

    The same as picking one at a time, but computed as a merge: the k-th input of source s
    is taken at level ``levels[s] + k / weight``, so the order is the `limit` smallest of
    those. A source with nothing queued takes nothing, so its turn goes to the others; the
    order is prefix-consistent (the first n of a longer order are the order for n)."""
    candidates: list[tuple[float, int]] = []  # (level at which it is taken, source's rank)
    for rank, (source, count) in enumerate(queued):
        step = 1.0 / weight_of(weights, source)
        base = levels.get(source, 0.0)
        candidates.extend((base + k * step, rank) for k in range(min(count, limit)))
    candidates.sort()
    return [queued[rank][0] for _, rank in candidates[:limit]]


def levels_after(
    levels: Mapping[S, float], taken: Sequence[S], weights: Mapping[S, float]
) -> dict[S, float]:
    """The levels once the inputs of `taken` (sources, one per input) were given."""
    after = dict(levels)
    for source in taken:
        after[source] = after.get(source, 0.0) + 1.0 / weight_of(weights, source)
    return after


def joining_level(levels: Mapping[S, float]) -> float:
    """The level a source gets when it has work again: the lowest of those with work, so an
    idle spell earns it no credit (its share went to the others meanwhile) and costs it no
    debt either; with nobody else working, 0."""
    return min(levels.values(), default=0.0)


def sources_under_share(held: Mapping[S, int], weights: Mapping[S, float]) -> set[S]:
    """The sources of one lane holding less than an equal-weight part of what the lane holds:
    the fetcher hands their buffered records over first, as it does high ones, since the
    consumer serves its buffer in fetch order and a trickle's record would otherwise wait
    behind every record of a flood fetched before it. With one source, none (nothing to put
    ahead of); with nothing held, none (no backlog to jump)."""
    total = sum(held.values())
    if len(held) < 2 or total <= 0:
        return set()
    total_weight = sum(weight_of(weights, s) for s in held)
    return {s for s, n in held.items() if n < total * weight_of(weights, s) / total_weight}


TRICKLE_FRACTION = 0.25  # a source holding under this part of its share is a trickle


def trickle_sources(held: Mapping[S, int], weights: Mapping[S, float]) -> set[S]:
    """The sources of one bucket with items but under a quarter of their weighted part of
    what the bucket holds: a trickle beside a flood. Such items get a call of their own (not
    a seat in a flood-sized call, which takes as long as the flood's calls do); sources with
    comparable backlogs share mixed calls by weight instead (`share_order`)."""
    total = sum(held.values())
    if len(held) < 2:
        return set()
    total_weight = sum(weight_of(weights, s) for s in held)
    return {
        s
        for s, n in held.items()
        if 0 < n < TRICKLE_FRACTION * total * weight_of(weights, s) / total_weight
    }
