"""The figures of `embedstream bench`, pure: the provider's latency model and the bounds it
sets, percentiles, table rows, and the settings recommended for a latency target.

No I/O and no clock: every function takes what it needs, so the arithmetic behind each
number in the table can be checked by a unit test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# OpenAI's limits for one embeddings call, the simulator's defaults.
PROVIDER_MAX_INPUTS = 2048
PROVIDER_MAX_TOKENS = 300_000
# Calls of at most this many inputs measure the client's fixed overhead per call.
SMALL_CALL_ITEMS = 64


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """A provider that serves ``capacity`` calls at once, each taking
    ``L(b) = base + per_token * tokens(b) + per_input * b`` milliseconds (the simulator's
    model), within announced budgets of requests and tokens per minute (0: none)."""

    base_ms: float = 40.0
    per_token_ms: float = 0.02
    per_input_ms: float = 0.0
    capacity: int = 8
    rpm: float = 0.0
    tpm: float = 0.0
    max_inputs: int = PROVIDER_MAX_INPUTS
    max_tokens: int = PROVIDER_MAX_TOKENS

    def __post_init__(self) -> None:
        for name in ("base_ms", "per_token_ms", "per_input_ms", "rpm", "tpm"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("capacity", "max_inputs", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")

    def per_item_ms(self, tokens_per_item: float) -> float:
        """What one more input adds to a call."""
        return self.per_token_ms * tokens_per_item + self.per_input_ms

    def latency_ms(self, items: float, tokens_per_item: float) -> float:
        """L(b): one call of ``items`` inputs of ``tokens_per_item`` tokens each."""
        return self.base_ms + self.per_item_ms(tokens_per_item) * items

    def largest_batch(self, tokens_per_item: float) -> int:
        """B: the most inputs of this size one call may carry (inputs or tokens per call)."""
        if tokens_per_item <= 0:
            return self.max_inputs
        return max(1, min(self.max_inputs, math.floor(self.max_tokens / tokens_per_item)))

    def budget_bound(self, tokens_per_item: float, batch: int) -> float:
        """Items/s the announced budgets allow with calls of ``batch`` inputs (inf: none)."""
        bound = math.inf
        if self.rpm > 0:
            bound = min(bound, self.rpm / 60.0 * batch)
        if self.tpm > 0 and tokens_per_item > 0:
            bound = min(bound, self.tpm / 60.0 / tokens_per_item)
        return bound

    def physical_bound(self, tokens_per_item: float) -> float:
        """X_phys = K * B / L(B): every slot busy with the largest allowed call, within the
        budgets. No batcher can deliver more, whatever the backlog."""
        batch = self.largest_batch(tokens_per_item)
        slots = self.capacity * batch / (self.latency_ms(batch, tokens_per_item) / 1000.0)
        return min(slots, self.budget_bound(tokens_per_item, batch))

    def closed_loop_bound(self, callers: int, tokens_per_item: float) -> float:
        """C / L(1): ``callers`` each awaiting its vector before asking again can at best
        each get one per lone call, whoever batches them (and never above X_phys)."""
        lone = callers / (self.latency_ms(1, tokens_per_item) / 1000.0)
        batch = min(callers, self.largest_batch(tokens_per_item))
        return min(
            lone, self.physical_bound(tokens_per_item), self.budget_bound(tokens_per_item, batch)
        )

    def open_loop_bound(self, offered_per_s: float, tokens_per_item: float) -> float:
        """Arrivals at a rate: at best each is served, up to X_phys."""
        return min(offered_per_s, self.physical_bound(tokens_per_item))


# --------------------------------------------------------------------------- percentiles


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); ``q`` in [0, 100]."""
    if not sorted_values:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] * (1.0 - fraction) + sorted_values[high] * fraction


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50_ms: float
    p95_ms: float
    p99_ms: float


def latency_percentiles(latencies_s: Sequence[float]) -> Percentiles | None:
    """P50/P95/P99 in ms of latencies in seconds; None when there are none."""
    ordered = sorted(latencies_s)
    if not ordered:
        return None
    return Percentiles(*(1000.0 * percentile(ordered, q) for q in (50, 95, 99)))


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a scenario as measured."""

    scenario: str  # e.g. "open 1,000/s"
    kind: str  # closed, backlog, open, kafka-backlog, kafka-poisson, endpoint-...
    items: int  # items that got their vector
    seconds: float  # the measured window
    bound_per_s: float | None  # the scenario's bound; None when unknown (a real endpoint)
    latency: Percentiles | None  # None when per-item latency means nothing (a backlog drain)
    calls: int  # provider calls in the window
    inputs: int  # inputs those calls carried
    client_cpu_s: float  # this process: engine, load generator, Kafka clients
    provider_cpu_s: float | None  # the simulator's process; None for a real endpoint
    failed: int = 0  # items that got an error, or no answer in time
    offered_per_s: float | None = None  # open loop: the arrival rate
    note: str = ""

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    @property
    def pct_of_bound(self) -> float | None:
        if not self.bound_per_s:
            return None
        return 100.0 * self.items_per_s / self.bound_per_s

    @property
    def mean_batch(self) -> float | None:
        return self.inputs / self.calls if self.calls else None

    @property
    def cpu_us_per_item(self) -> float | None:
        """This process's CPU µs per item (engine, load, Kafka clients); None for rows that
        count no CPU (a stage of a timeline) or no items."""
        return 1e6 * self.client_cpu_s / self.items if self.items and self.client_cpu_s else None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(
            items_per_s=self.items_per_s,
            pct_of_bound=self.pct_of_bound,
            mean_batch=self.mean_batch,
            cpu_us_per_item=self.cpu_us_per_item,
        )
        return doc


# --------------------------------------------------------------------------- recommendations


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Settings for a P99 target on a latency model, each with the reason for it."""

    target_p99_ms: float
    max_concurrency: int
    max_wait_ms: float
    scale_factor: float
    reachable: bool  # False: even a lone item takes longer than the target
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recommend_max_concurrency(model: LatencyModel) -> int:
    """The provider's capacity K. Fewer calls in flight leave its slots idle (throughput
    lost for nothing); more only queue at the provider, where they add latency and no
    throughput, and hide from the batcher the backlog it would have batched. Under an
    announced budget K is still right: the governor paces calls to the budget itself."""
    return model.capacity


def recommend_max_wait_ms(
    model: LatencyModel, target_p99_ms: float, tokens_per_item: float, overhead_ms: float = 0.0
) -> float:
    """``target - L(1) - overhead``, at least 0. The policy never holds an item longer than
    ``max_wait_ms`` (the wait budget ``max_wait * (1 - 1/(1 + depth/scale_factor))`` stays
    below it), and the item's call takes at least L(1) after that, plus the client's own
    overhead per call (HTTP, parsing; measured). So this is the longest wait that keeps an
    item that waited fully within the target when its call is small; bigger calls under a
    deep backlog take longer, but there the queue, not the wait, sets the latency."""
    spare = target_p99_ms - model.latency_ms(1, tokens_per_item) - max(overhead_ms, 0.0)
    return float(max(0, math.floor(spare)))


def recommend_scale_factor(model: LatencyModel, tokens_per_item: float) -> float:
    """``K * b_half``, where ``b_half = base / per_item`` is the batch whose call spends as
    long on its inputs as on its fixed cost (L(b_half) = 2 * base, about 2 * L(1)).

    The wait budget reaches half of ``max_wait_ms`` at depth ``scale_factor``. Below
    ``K * b_half`` buffered items, one round of calls spread over the K slots clears the
    whole backlog within about two lone calls: waiting would only add latency. Beyond it
    the backlog outlasts a round, items queue for longer than a lone call anyway, and each
    call still spends a large part of its time on the fixed cost: holding items to fill
    bigger calls costs little in latency there and buys throughput, so half the wait is
    worth it from that depth on. With no per-item cost (every call costs the same) waiting
    never pays before the largest batches: ``K * B``."""
    largest = model.largest_batch(tokens_per_item)
    per_item = model.per_item_ms(tokens_per_item)
    b_half = model.base_ms / per_item if per_item > 0 else float(largest)
    return float(max(1, round(model.capacity * min(b_half, largest))))


def recommend(
    model: LatencyModel, target_p99_ms: float, tokens_per_item: float, overhead_ms: float = 0.0
) -> Recommendation:
    """All three settings for ``target_p99_ms`` on ``model``, with their reasons."""
    lone = model.latency_ms(1, tokens_per_item)
    concurrency = recommend_max_concurrency(model)
    wait = recommend_max_wait_ms(model, target_p99_ms, tokens_per_item, overhead_ms)
    scale = recommend_scale_factor(model, tokens_per_item)
    reachable = target_p99_ms > lone + max(overhead_ms, 0.0)
    reasons = (
        f"max_concurrency {concurrency}: the provider serves {model.capacity} calls at once; "
        "fewer idles its slots, more only queue there",
        f"max_wait_ms {wait:g}: target {target_p99_ms:g} ms - L(1) {lone:.1f} ms"
        + (f" - client overhead per call {overhead_ms:.1f} ms" if overhead_ms > 0 else "")
        + ("" if reachable else "; the target is below one lone call: unreachable"),
        f"scale_factor {scale:g}: "
        + (
            f"{model.capacity} slots x {scale / model.capacity:.0f} items, the call that spends "
            f"as long on its inputs as on its {model.base_ms:.4g} ms fixed cost"
            if model.per_item_ms(tokens_per_item) > 0
            else f"inputs cost nothing, so waiting pays only for the largest calls "
            f"({model.capacity} slots x {model.largest_batch(tokens_per_item)})"
        ),
    )
    return Recommendation(target_p99_ms, concurrency, wait, scale, reachable, reasons)


def call_overhead_ms(
    calls: Sequence[tuple[int, float]], model: LatencyModel, tokens_per_item: float
) -> float:
    """What the client adds to a small call beyond the provider's time: the median over
    calls of at most SMALL_CALL_ITEMS inputs of (latency measured around the call) - L(its
    inputs), at least 0; 0 without such calls. That is HTTP, encoding, parsing and the event
    loop's delays, which an item in a small call spends on top of L(b) whatever the batcher
    decides, so the wait budget must leave room for it. Big calls are left out: parsing
    their vectors costs time per input, which says nothing about a lone item's latency."""
    extra = sorted(
        ms - model.latency_ms(items, tokens_per_item)
        for items, ms in calls
        if items <= SMALL_CALL_ITEMS
    )
    return max(0.0, percentile(extra, 50)) if extra else 0.0


# --------------------------------------------------------------------------- fitting


@dataclass(frozen=True, slots=True)
class LineFit:
    """L(b) = base_ms + per_item_ms * b fitted to calls of a real endpoint."""

    base_ms: float
    per_item_ms: float
    calls: int


def fit_call_latency(samples: Sequence[tuple[int, float]]) -> LineFit | None:
    """Least squares of (items, latency ms) pairs; None without two distinct sizes.
    Coefficients are clamped at 0: a negative one would make splitting look free."""
    if len({items for items, _ in samples}) < 2:
        return None
    n = len(samples)
    mean_x = sum(x for x, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in samples)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in samples)
    slope = max(0.0, sxy / sxx)
    return LineFit(max(0.0, mean_y - slope * mean_x), slope, n)


# --------------------------------------------------------------------------- scale-out


@dataclass(frozen=True, slots=True)
class ScaleOutRow:
    """N processors in one group draining a backlog published once the group has settled."""

    processors: int
    items: int  # the backlog, published once the group has settled
    seconds: float  # from the first event published to the last result
    processor_cpu_s: float  # all members together, in the window
    provider_cpu_s: float | None
    calls: int
    inputs: int
    bound_per_s: float | None
    settle_s: float = 0.0  # from every member answering /healthz to a settled group
    publish_s: float = 0.0  # how long publishing the backlog took, inside ``seconds``
    note: str = ""

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_s_per_1000(self) -> float | None:
        """Processor CPU seconds per 1,000 items: what projects the scaling to more cores."""
        return 1000.0 * self.processor_cpu_s / self.items if self.items else None

    @property
    def provider_cpu_s_per_1000(self) -> float | None:
        if self.provider_cpu_s is None or not self.items:
            return None
        return 1000.0 * self.provider_cpu_s / self.items

    @property
    def pct_of_bound(self) -> float | None:
        return 100.0 * self.items_per_s / self.bound_per_s if self.bound_per_s else None

    @property
    def mean_batch(self) -> float | None:
        return self.inputs / self.calls if self.calls else None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(
            items_per_s=self.items_per_s,
            cpu_s_per_1000=self.cpu_s_per_1000,
            provider_cpu_s_per_1000=self.provider_cpu_s_per_1000,
            pct_of_bound=self.pct_of_bound,
            mean_batch=self.mean_batch,
        )
        return doc


def cores_needed(row: ScaleOutRow, items_per_s: float) -> float | None:
    """Processor cores a rate needs at this row's CPU cost per item: the projection of the
    scale-out figure to a bigger machine (provider and broker not included)."""
    per_1000 = row.cpu_s_per_1000
    return None if per_1000 is None else items_per_s * per_1000 / 1000.0
