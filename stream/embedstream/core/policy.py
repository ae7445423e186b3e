"""The adaptive batching policy: pure arithmetic over a bucket's state and an injected time.

A bucket flushes when

- it holds more than one full batch (``size``: ``max_items`` reached; ``tokens``: the next item
  would push the batch past ``max_tokens``), or
- its oldest item has waited ``max_wait * (1 - 1 / (1 + depth / scale_factor))`` (``time``).

The timer counts from the oldest buffered item's arrival, never from the previous flush, so an
item that arrives just after a flush is not held for a whole extra window. ``depth`` is the
backlog behind the oldest item: the other items buffered in memory plus the consumer lag of
the assigned partitions. At depth 0 the wait is 0 and a lone item goes out at once; as the
backlog grows the wait approaches ``max_wait`` and batches fill up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class FlushReason(StrEnum):
    """Why a batch was cut: the one list metrics labels, `top` and the docs derive from."""

    SIZE = "size"  # max_items reached
    TOKENS = "tokens"  # the next item would pass max_tokens
    TIME = "time"  # the oldest item's wait budget ran out
    DRAIN = "drain"  # shutdown or handoff: everything buffered goes now
    PRIORITY = "priority"  # a high item sent early because low work wants the call slot


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_items: int
    max_tokens: int
    max_wait_s: float
    scale_factor: float

    def __post_init__(self) -> None:
        if self.max_items < 1 or self.max_tokens < 1:
            raise ValueError("max_items and max_tokens must be positive")
        if self.max_wait_s < 0 or self.scale_factor <= 0:
            raise ValueError("max_wait_s must be >= 0 and scale_factor > 0")


@dataclass(frozen=True, slots=True)
class Flush:
    reason: FlushReason


@dataclass(frozen=True, slots=True)
class Wait:
    seconds: float


def wait_budget(limits: BatchLimits, depth: int) -> float:
    """How long the oldest item may wait at this backlog depth."""
    depth = max(depth, 0)
    return limits.max_wait_s * (1.0 - 1.0 / (1.0 + depth / limits.scale_factor))


def batch_length(token_counts: Sequence[int], limits: BatchLimits) -> int:
    """How many leading items form the next batch: at least one, within both limits.

    A single item over ``max_tokens`` still forms a batch of one; rejecting it is the job of the
    per-input limit check, not of the batch policy.
    """
    total = 0
    for count, tokens in enumerate(token_counts):
        if count == limits.max_items or (count > 0 and total + tokens > limits.max_tokens):
            return count
        total += tokens
    return len(token_counts)


def decide(
    limits: BatchLimits,
    token_counts: Sequence[int],
    oldest_arrival: float,
    now: float,
    depth: int,
) -> Flush | Wait | None:
    """What to do with one bucket now; None when it is empty."""
    if not token_counts:
        return None
    n = batch_length(token_counts, limits)
    if n == limits.max_items:
        return Flush(FlushReason.SIZE)
    if n < len(token_counts):
        return Flush(FlushReason.TOKENS)
    remaining = wait_budget(limits, depth) - (now - oldest_arrival)
    if remaining <= 0:
        return Flush(FlushReason.TIME)
    return Wait(remaining)


# Spreading a backlog over idle call slots stops here: smaller batches would cost more calls
# than the parallelism saves.
MIN_SPREAD_ITEMS = 32


def spread_length(fits: int, buffered: int, slots: int) -> int:
    """Cut size for a backlog when several call slots can serve it: even rounds.

    One full batch per slot with the last round half empty makes a burst wait for a round of
    big, slow calls. Instead the backlog is split into as few rounds of `slots` calls as the
    batch limit allows, each call the same size: 3000 items on 8 slots with batches of at most
    256 go out as 16 calls of 188 (two full rounds) rather than 12 of 256 (the second round
    half idle). Never below MIN_SPREAD_ITEMS, never above what fits (``fits``).
    """
    if slots <= 1 or buffered <= MIN_SPREAD_ITEMS:
        return fits
    rounds = -(-buffered // (slots * max(fits, 1)))
    even = -(-buffered // (slots * rounds))
    return min(fits, max(MIN_SPREAD_ITEMS, even))
