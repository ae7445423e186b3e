"""Adaptive batching engine vs. no batching vs. a static size/time batcher, in one run.

    python bench/bench_batching.py [--quick] [--seed N] [--json out.json]

A benchmark, not a test: it asserts no times. Machines are noisy, so every strategy runs on
every workload in the same process, against the same simulated provider, one after another, and
the report compares them side by side (ratios), not against fixed thresholds.

What it does:

1. Starts one in-process ``SimulatorServer`` on 127.0.0.1 with the latency model in
   ``LATENCY_MODEL`` (see the comment there for why those numbers).
2. Generates three open-loop workloads from a seeded RNG (arrival times are fixed in advance and
   honoured regardless of completions, as records arriving on a stream would be):
   ``sparse`` (Poisson ~20 items/s), ``steady`` (Poisson ~400 items/s) and ``burst`` (a backlog
   of ~3000 items at t=0, then a trickle).
3. Runs three strategies behind the same ``async def embed(text) -> vector`` interface, all on
   the same ``OpenAIEmbedder`` settings and the same maximum concurrency: ``no-batching``,
   ``static`` (flush at N items or T ms after the previous flush) and ``engine``
   (``BatchingClient``).
4. Measures the engine's own overhead against the zero-latency ``RecordingBackend``.
5. Prints one markdown table per workload and, with ``--json``, writes every figure to a file.

Latency is measured per item from its *scheduled* arrival time to the moment its vector is back,
so a strategy (or a busy event loop) that falls behind pays for it in latency rather than
hiding it (no coordinated omission).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

from embedsim import SimulatorConfig, SimulatorServer, expected_vector
from embedstream.engine.backend import BatchCall, EmbeddingBackend
from embedstream.engine.client import BatchingClient
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.testing import RecordingBackend

Vector = list[float] | str

MODEL = "text-embedding-3-small"
DIMENSIONS = SimulatorConfig().default_dimensions  # what the simulator returns when not asked
MAX_CONCURRENCY = 8  # every strategy: at most this many calls in flight
REQUEST_TIMEOUT_S = 120.0  # generous: a timeout would be a benchmark failure, not a result

# The simulated provider. A call takes base_ms + per_token_ms * tokens + per_input_ms * inputs
# and at most `capacity` calls are served at once (the rest queue on the provider's side).
#
# - base_ms = 40: the fixed cost of one call, whatever its size: network round trip, TLS,
#   auth, routing, request parsing and the provider's own queueing and GPU scheduling. Hosted
#   embedding APIs answer a one-word request in roughly 50-300 ms; 40 ms is a conservative
#   (batching-unfriendly) figure, closer to a self-hosted server in the same region. This fixed
#   per-call overhead is what makes batching pay: a batch of 100 pays it once instead of 100x.
# - per_token_ms = 0.02: 50,000 tokens/s per call slot, i.e. the model's actual compute, which
#   batching cannot avoid; it makes large batches slower than small ones, as they really are.
# - per_input_ms = 0.05: per-item work on the provider (tokenising, pooling, serialising).
# - capacity = 8: the provider serves 8 calls at once, matching MAX_CONCURRENCY, so no strategy
#   gains by queueing extra calls on the provider side.
LATENCY_MODEL = SimulatorConfig(base_ms=40.0, per_token_ms=0.02, per_input_ms=0.05, capacity=8)

# Strategy settings (shared where they mean the same thing).
STATIC_MAX_ITEMS = 64
STATIC_INTERVAL_MS = 50.0
ENGINE_MAX_BATCH_SIZE = 256
ENGINE_MAX_WAIT_MS = 50.0
ENGINE_SCALE_FACTOR = 64.0

# Engine overhead: zero-latency backend, short texts, huge batches.
OVERHEAD_TARGET_ITEMS_PER_S = 100_000.0
OVERHEAD_MAX_BATCH_SIZE = 2048
OVERHEAD_MAX_BATCH_TOKENS = 100_000_000

SAMPLE_CHECKS = 32  # vectors per run compared with the simulator's expected_vector()


# --------------------------------------------------------------------------- workloads

_VOCABULARY = (
    "stream batch token vector kafka offset latency backlog partition consumer embedding "
    "search retrieval document query model provider window priority lane budget signal river "
    "harbor lantern meadow orbit quartz velvet ember summit canyon invoice customer shipment "
    "refund account password error timeout deploy release ticket review summary meeting "
    "the a of and to in is for on with that this it as be by at from"
)
WORDS = _VOCABULARY.split()
PUNCTUATION = (".", ",", "?", "!", ";")


def make_text(rng: random.Random, index: int) -> str:
    """A text of realistic, mixed length. The index prefix keeps every text distinct, so the
    engine's in-batch deduplication never helps it here."""
    roll = rng.random()
    if roll < 0.60:
        words = rng.randint(4, 16)  # queries, titles, chat messages
    elif roll < 0.92:
        words = rng.randint(30, 100)  # paragraphs, support tickets
    else:
        words = rng.randint(200, 400)  # documents, long emails
    parts = [f"item {index}:"]
    for _ in range(words):
        word = rng.choice(WORDS)
        if rng.random() < 0.08:
            word += rng.choice(PUNCTUATION)
        parts.append(word)
    return " ".join(parts)


def poisson_arrivals(
    rng: random.Random, rate: float, duration_s: float, start: float
) -> list[float]:
    """Arrival offsets (seconds) of a Poisson process of ``rate`` items/s over the window."""
    arrivals: list[float] = []
    t = start
    while True:
        t += rng.expovariate(rate)
        if t >= start + duration_s:
            return arrivals
        arrivals.append(t)


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    arrivals: list[float]  # seconds after the run's start, ascending
    texts: list[str]
    backlog: int = 0  # leading items that all arrive at once (burst), 0 for none

    @property
    def items(self) -> int:
        return len(self.arrivals)

    @property
    def span_s(self) -> float:
        return self.arrivals[-1] - self.arrivals[0] if self.arrivals else 0.0


def build_workloads(seed: int, quick: bool) -> list[Workload]:
    sparse_s = 3.0 if quick else 10.0
    steady_s = 2.0 if quick else 6.0
    burst_items = 800 if quick else 3000
    trickle_s = 1.5 if quick else 4.0

    def rng_for(k: int) -> random.Random:
        return random.Random(seed * 1_000 + k)

    workloads: list[Workload] = []

    rng = rng_for(1)
    arrivals = poisson_arrivals(rng, 20.0, sparse_s, 0.0)
    workloads.append(
        Workload(
            "sparse",
            f"Poisson ~20 items/s for {sparse_s:g} s",
            arrivals,
            [make_text(rng, i) for i in range(len(arrivals))],
        )
    )

    rng = rng_for(2)
    arrivals = poisson_arrivals(rng, 400.0, steady_s, 0.0)
    workloads.append(
        Workload(
            "steady",
            f"Poisson ~400 items/s for {steady_s:g} s",
            arrivals,
            [make_text(rng, i) for i in range(len(arrivals))],
        )
    )

    rng = rng_for(3)
    arrivals = [0.0] * burst_items + poisson_arrivals(rng, 20.0, trickle_s, 0.0)
    workloads.append(
        Workload(
            "burst",
            f"{burst_items} items at t=0, then Poisson ~20 items/s for {trickle_s:g} s",
            arrivals,
            [make_text(rng, i) for i in range(len(arrivals))],
            backlog=burst_items,
        )
    )
    return workloads


# --------------------------------------------------------------------------- strategies


class Strategy(Protocol):
    name: str

    def start(self) -> None: ...

    async def embed(self, text: str) -> Vector: ...

    async def close(self) -> None: ...


def one_call(texts: Sequence[str]) -> BatchCall:
    return BatchCall(MODEL, texts, "float", None)


class NoBatching:
    """One provider call per item; at most ``max_concurrency`` calls in flight."""

    name = "no-batching"

    def __init__(self, backend: EmbeddingBackend, *, max_concurrency: int) -> None:
        self._backend = backend
        self._slots = asyncio.Semaphore(max_concurrency)

    def start(self) -> None:
        return None

    async def embed(self, text: str) -> Vector:
        async with self._slots:
            outcome = await self._backend.embed(one_call([text]))
        return outcome.vectors[0]

    async def close(self) -> None:
        await self._backend.close()


class StaticBatcher:
    """A fixed batcher: flush at ``max_items`` items, or ``interval_s`` after the previous flush.

    The timer mirrors faust's ``Stream.take(max_, within)``: it waits for "buffer full" with a
    timeout of ``within`` that restarts after every flush (and after every expiry, even with an
    empty buffer). It does not count from the oldest buffered item's arrival, so an item waits
    for whatever is left of the current window: 0..T ms even when the provider is idle. Batches
    are cut as soon as they are due and then queue for one of ``max_concurrency`` call slots.
    ``make_call`` builds each call from its texts (bench_tails.py names its model and format);
    it has the surface of bench's load targets (``submit``) as well as this script's.
    """

    name = "static"

    def __init__(
        self,
        backend: EmbeddingBackend,
        *,
        max_items: int,
        interval_s: float,
        max_concurrency: int,
        make_call: Callable[[Sequence[str]], BatchCall] = one_call,
    ) -> None:
        self._backend = backend
        self._max_items = max_items
        self._interval_s = interval_s
        self._make_call = make_call
        self._slots = asyncio.Semaphore(max_concurrency)
        self._buffer: list[tuple[str, asyncio.Future[Vector]]] = []
        self._flushed = asyncio.Event()
        self._calls: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._timer = asyncio.create_task(self._run_timer())

    def submit(
        self, text: str, *, priority: Literal["high", "low"] = "high"
    ) -> asyncio.Future[Vector]:
        future: asyncio.Future[Vector] = asyncio.get_running_loop().create_future()
        self._buffer.append((text, future))
        if len(self._buffer) >= self._max_items:
            self._flush()
        return future

    async def embed(self, text: str) -> Vector:
        return await self.submit(text)

    async def close(self, timeout_s: float | None = None) -> None:
        self._closing = True
        if self._buffer:
            self._flush()
        self._flushed.set()
        if self._timer is not None:
            await self._timer
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._calls), timeout_s)
        await self._backend.close()

    def _flush(self) -> None:
        batch, self._buffer = self._buffer, []
        self._flushed.set()  # restarts the timer window, like a full buffer in take()
        task = asyncio.create_task(self._send(batch))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _run_timer(self) -> None:
        while not self._closing:
            self._flushed.clear()
            try:
                await asyncio.wait_for(self._flushed.wait(), self._interval_s)
            except TimeoutError:
                if self._buffer:
                    self._flush()

    async def _send(self, batch: list[tuple[str, asyncio.Future[Vector]]]) -> None:
        async with self._slots:
            try:
                outcome = await self._backend.embed(self._make_call([text for text, _ in batch]))
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                return
        for (_, future), vector in zip(batch, outcome.vectors, strict=True):
            if not future.done():
                future.set_result(vector)


class Engine:
    """The adaptive batching engine, as a library (``BatchingClient``)."""

    name = "engine"

    def __init__(self, backend: EmbeddingBackend, *, max_concurrency: int) -> None:
        self._client = BatchingClient(
            backend,
            model=MODEL,
            max_batch_size=ENGINE_MAX_BATCH_SIZE,
            max_wait_ms=ENGINE_MAX_WAIT_MS,
            scale_factor=ENGINE_SCALE_FACTOR,
            max_concurrency=max_concurrency,
        )

    def start(self) -> None:
        self._client.start()

    async def embed(self, text: str) -> Vector:
        return await self._client.embed(text)

    async def close(self) -> None:
        await self._client.close()


def make_strategies(base_url: str) -> list[Callable[[], Strategy]]:
    """Factories, so that every run gets fresh state and a fresh (identical) embedder."""

    def embedder() -> OpenAIEmbedder:
        return OpenAIEmbedder(base_url=base_url, api_key=None, timeout_s=REQUEST_TIMEOUT_S)

    def no_batching() -> Strategy:
        return NoBatching(embedder(), max_concurrency=MAX_CONCURRENCY)

    def static() -> Strategy:
        return StaticBatcher(
            embedder(),
            max_items=STATIC_MAX_ITEMS,
            interval_s=STATIC_INTERVAL_MS / 1000.0,
            max_concurrency=MAX_CONCURRENCY,
        )

    def engine() -> Strategy:
        return Engine(embedder(), max_concurrency=MAX_CONCURRENCY)

    return [no_batching, static, engine]


# --------------------------------------------------------------------------- measuring


@dataclass
class RunResult:
    workload: str
    strategy: str
    items: int
    failed: int
    wrong_vectors: int  # sampled vectors that did not match the simulator's expected vector
    seconds: float  # first arrival -> last completion
    items_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    api_calls: int
    inputs_served: int
    mean_batch: float
    provider_peak_concurrency: int
    cpu_s: float  # process CPU time during the run: client, simulator and load generator
    max_arrival_lag_ms: float  # how late the generator released an item (event-loop stalls)
    backlog_cleared_ms: float | None  # burst: when the last of the t=0 backlog had its vector
    backlog_items_per_s: float | None  # burst: backlog / backlog_cleared


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] * (1.0 - fraction) + sorted_values[high] * fraction


def vector_matches(vector: Vector, text: str) -> bool:
    if not isinstance(vector, list) or len(vector) != DIMENSIONS:
        return False
    expected = expected_vector(MODEL, text, DIMENSIONS)
    return all(abs(a - b) <= 1e-6 for a, b in zip(vector, expected, strict=True))


async def warm_up(strategy: Strategy) -> None:
    """Open a connection or two before measuring; its calls are not counted."""
    await asyncio.gather(*(strategy.embed(f"warm-up {k}") for k in range(MAX_CONCURRENCY)))


async def run_workload(
    factory: Callable[[], Strategy],
    workload: Workload,
    simulator: SimulatorServer,
    sample_rng: random.Random,
) -> RunResult:
    strategy = factory()
    strategy.start()
    await warm_up(strategy)
    gc.collect()
    simulator.reset_stats()

    n = workload.items
    loop = asyncio.get_running_loop()
    sampled = set(sample_rng.sample(range(n), min(SAMPLE_CHECKS, n)))
    latencies = [math.nan] * n
    completions = [math.nan] * n
    failed = 0
    wrong = 0
    start = loop.time() + 0.02  # a moment to get the generator going
    deadlines = [start + offset for offset in workload.arrivals]

    async def one(i: int) -> None:
        nonlocal failed, wrong
        try:
            vector = await strategy.embed(workload.texts[i])
        except Exception:
            failed += 1
            return
        done = loop.time()
        completions[i] = done
        latencies[i] = done - deadlines[i]
        if i in sampled and not vector_matches(vector, workload.texts[i]):
            wrong += 1

    cpu_before = time.process_time()
    tasks: list[asyncio.Task[None]] = []
    max_lag = 0.0
    i = 0
    while i < n:
        now = loop.time()
        if deadlines[i] > now:
            await asyncio.sleep(deadlines[i] - now)
            continue
        max_lag = max(max_lag, now - deadlines[i])
        while i < n and deadlines[i] <= now:
            tasks.append(asyncio.create_task(one(i)))
            i += 1
    await asyncio.gather(*tasks)
    cpu_s = time.process_time() - cpu_before
    stats = simulator.stats
    api_calls, inputs_served, peak = stats.calls, stats.inputs, stats.peak_concurrency
    await strategy.close()

    done_latencies = sorted(x for x in latencies if not math.isnan(x))
    last_completion = max((c for c in completions if not math.isnan(c)), default=deadlines[0])
    seconds = last_completion - deadlines[0]
    cleared_ms: float | None = None
    backlog_rate: float | None = None
    backlog_latencies = [x for x in latencies[: workload.backlog] if not math.isnan(x)]
    if backlog_latencies:  # the backlog all arrived at deadlines[0]
        cleared = max(backlog_latencies)
        cleared_ms = cleared * 1000
        backlog_rate = len(backlog_latencies) / cleared
    return RunResult(
        workload=workload.name,
        strategy=strategy.name,
        items=n,
        failed=failed,
        wrong_vectors=wrong,
        seconds=seconds,
        items_per_s=len(done_latencies) / seconds if seconds > 0 else math.nan,
        p50_ms=percentile(done_latencies, 50) * 1000,
        p99_ms=percentile(done_latencies, 99) * 1000,
        max_ms=(done_latencies[-1] * 1000) if done_latencies else math.nan,
        mean_ms=(sum(done_latencies) / len(done_latencies) * 1000) if done_latencies else math.nan,
        api_calls=api_calls,
        inputs_served=inputs_served,
        mean_batch=inputs_served / api_calls if api_calls else math.nan,
        provider_peak_concurrency=peak,
        cpu_s=cpu_s,
        max_arrival_lag_ms=max_lag * 1000,
        backlog_cleared_ms=cleared_ms,
        backlog_items_per_s=backlog_rate,
    )


@dataclass
class OverheadResult:
    items: int
    runs_items_per_s: list[float] = field(default_factory=list)
    best_items_per_s: float = 0.0
    target_items_per_s: float = OVERHEAD_TARGET_ITEMS_PER_S
    meets_target: bool = False
    calls_per_run: int = 0


async def measure_overhead(items: int, runs: int) -> OverheadResult:
    """Items/s through BatchingClient when the provider costs nothing: pure engine cost.

    Timed from the first submit to the last vector (``embed_many``); building the texts and
    starting/closing the client are outside the timing. ``max_wait_ms`` is the library's
    default (20 ms): the final partial batch may wait for it, and that wait is counted.
    """
    texts = [f"short text number {i}" for i in range(items)]
    result = OverheadResult(items)
    for _ in range(runs):
        backend = RecordingBackend()
        gc.collect()
        async with BatchingClient(
            backend,
            model=MODEL,
            max_batch_size=OVERHEAD_MAX_BATCH_SIZE,
            max_batch_tokens=OVERHEAD_MAX_BATCH_TOKENS,
            max_concurrency=MAX_CONCURRENCY,
        ) as client:
            started = time.perf_counter()
            vectors = await client.embed_many(texts)
            elapsed = time.perf_counter() - started
        if len(vectors) != items:
            raise RuntimeError(f"overhead run returned {len(vectors)} vectors for {items} texts")
        result.runs_items_per_s.append(items / elapsed)
        result.calls_per_run = len(backend.calls)
    result.best_items_per_s = max(result.runs_items_per_s)
    result.meets_target = result.best_items_per_s >= OVERHEAD_TARGET_ITEMS_PER_S
    return result


# --------------------------------------------------------------------------- reporting


def ratio(value: float, baseline: float) -> str:
    if not baseline or math.isnan(value) or math.isnan(baseline):
        return "n/a"
    return f"{value / baseline:.2f}x"


def render_table(workload: Workload, results: list[RunResult]) -> str:
    by_name = {r.strategy: r for r in results}
    base = by_name.get(NoBatching.name)
    lines = [
        f"### {workload.name}: {workload.description} ({workload.items} items)",
        "",
        "| strategy | items/s | P50 ms | P99 ms | API calls | mean batch "
        "| calls vs none | P99 vs none | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        calls_ratio = ratio(r.api_calls, base.api_calls) if base else "n/a"
        p99_ratio = ratio(r.p99_ms, base.p99_ms) if base else "n/a"
        lines.append(
            f"| {r.strategy} | {r.items_per_s:,.0f} | {r.p50_ms:,.1f} | {r.p99_ms:,.1f} "
            f"| {r.api_calls:,} | {r.mean_batch:,.1f} | {calls_ratio} | {p99_ratio} "
            f"| {r.cpu_s:.1f} |"
        )
    static, engine = by_name.get(StaticBatcher.name), by_name.get(Engine.name)
    if static and engine:
        lines += [
            "",
            f"engine vs static: P50 {ratio(engine.p50_ms, static.p50_ms)}, "
            f"P99 {ratio(engine.p99_ms, static.p99_ms)}, "
            f"API calls {ratio(engine.api_calls, static.api_calls)}, "
            f"items/s {ratio(engine.items_per_s, static.items_per_s)}",
        ]
    if workload.backlog:
        cleared = [
            f"{r.strategy} {r.backlog_cleared_ms:,.0f} ms ({r.backlog_items_per_s:,.0f} items/s)"
            for r in results
            if r.backlog_cleared_ms is not None and r.backlog_items_per_s is not None
        ]
        lines += ["", f"backlog of {workload.backlog} cleared in: " + ", ".join(cleared)]
    problems = [
        f"{r.strategy}: {r.failed} failed, {r.wrong_vectors} wrong sampled vectors"
        for r in results
        if r.failed or r.wrong_vectors or r.inputs_served != r.items - r.failed
    ]
    if problems:
        lines += ["", "WARNING: " + "; ".join(problems)]
    lags = [f"{r.strategy} {r.max_arrival_lag_ms:.0f} ms" for r in results]
    lines += ["", "max arrival lag (event-loop stalls): " + ", ".join(lags)]
    return "\n".join(lines)


def render_overhead(result: OverheadResult) -> str:
    runs = ", ".join(f"{x:,.0f}" for x in result.runs_items_per_s)
    verdict = "meets" if result.meets_target else "DOES NOT meet"
    return (
        f"### engine overhead: {result.items:,} short texts via embed_many, zero-latency backend, "
        f"max_batch_size {OVERHEAD_MAX_BATCH_SIZE}\n\n"
        f"best of {len(result.runs_items_per_s)}: **{result.best_items_per_s:,.0f} items/s** "
        f"(runs: {runs}; {result.calls_per_run} calls per run) — {verdict} the target of "
        f"{result.target_items_per_s:,.0f} items/s"
    )


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> dict[str, object]:
    workloads = build_workloads(args.seed, args.quick)
    sample_rng = random.Random(args.seed)
    results: dict[str, list[RunResult]] = {w.name: [] for w in workloads}
    wall_started = time.perf_counter()

    simulator = SimulatorServer(LATENCY_MODEL)
    await simulator.start("127.0.0.1", 0)
    try:
        factories = make_strategies(simulator.url)
        for workload in workloads:
            for factory in factories:
                result = await run_workload(factory, workload, simulator, sample_rng)
                results[workload.name].append(result)
                progress(
                    f"{workload.name:>6} {result.strategy:<11} {result.items_per_s:8,.0f} items/s "
                    f"P50 {result.p50_ms:8,.1f} ms  P99 {result.p99_ms:8,.1f} ms  "
                    f"{result.api_calls:5,} calls  ({result.seconds:.1f} s)"
                )
    finally:
        await simulator.stop()

    overhead_items = 200_000
    overhead = await measure_overhead(overhead_items, runs=3)
    progress(f"overhead: best {overhead.best_items_per_s:,.0f} items/s")
    wall_s = time.perf_counter() - wall_started

    print(f"# Batching benchmark ({'quick' if args.quick else 'full'} run, seed {args.seed})\n")
    print(
        f"Provider: simulator, base {LATENCY_MODEL.base_ms:g} ms + "
        f"{LATENCY_MODEL.per_token_ms:g} ms/token + {LATENCY_MODEL.per_input_ms:g} ms/input, "
        f"capacity {LATENCY_MODEL.capacity}; every strategy max {MAX_CONCURRENCY} calls in flight."
    )
    print(
        f"static: {STATIC_MAX_ITEMS} items or {STATIC_INTERVAL_MS:g} ms after the previous flush; "
        f"engine: max_batch_size {ENGINE_MAX_BATCH_SIZE}, max_wait_ms {ENGINE_MAX_WAIT_MS:g}, "
        f"scale_factor {ENGINE_SCALE_FACTOR:g}.\n"
    )
    for workload in workloads:
        print(render_table(workload, results[workload.name]))
        print()
    print(render_overhead(overhead))
    print(f"\nTotal wall time {wall_s:.0f} s on {os.cpu_count()} CPU(s).")

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "seed": args.seed,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "wall_s": wall_s,
        "latency_model": {
            "base_ms": LATENCY_MODEL.base_ms,
            "per_token_ms": LATENCY_MODEL.per_token_ms,
            "per_input_ms": LATENCY_MODEL.per_input_ms,
            "capacity": LATENCY_MODEL.capacity,
        },
        "strategies": {
            "max_concurrency": MAX_CONCURRENCY,
            "static": {"max_items": STATIC_MAX_ITEMS, "interval_ms": STATIC_INTERVAL_MS},
            "engine": {
                "max_batch_size": ENGINE_MAX_BATCH_SIZE,
                "max_wait_ms": ENGINE_MAX_WAIT_MS,
                "scale_factor": ENGINE_SCALE_FACTOR,
            },
        },
        "workloads": [
            {
                "name": w.name,
                "description": w.description,
                "items": w.items,
                "arrival_span_s": w.span_s,
                "results": [asdict(r) for r in results[w.name]],
            }
            for w in workloads
        ],
        "overhead": asdict(overhead),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (~40 s)")
    parser.add_argument("--seed", type=int, default=1, help="seed of arrivals and texts")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
            out.write("\n")


if __name__ == "__main__":
    main()
