"""The in-process scenarios: `BatchingClient` against the provider under test.

- **closed loop**: C callers, each awaiting its own vector before asking for the next;
  bound C / L(1).
- **backlog**: N texts submitted at once; bound X_phys = K * B / L(B).
- **open loop**: Poisson arrivals at a rate, fixed in advance and honoured whatever has
  finished; latency runs from each item's *scheduled* arrival, so a client that falls
  behind pays for it in latency instead of hiding it (no coordinated omission).
- **endpoint**: a closed loop and a backlog on a real endpoint, within a budget of texts.
- **flood**: a low backlog submitted at once while high requests arrive (Poisson) during
  its drain: the high latency, and the low drain rate beside its rate with no high traffic.

Each scenario gets a fresh client. A throwaway client on the same embedder first opens its
connections with a few calls that are not counted; the measured client starts with the cost
model's prior, as a freshly started service does (learning L(b) from a warm-up of small,
cold calls would teach it a wrong slope: its first backlog would be cut badly).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from embedstream.engine.backend import BatchCall, BatchOutcome, EmbeddingBackend
from embedstream.engine.client import BatchingClient
from embedstream.tools.bench.context import BenchContext, LoadTarget, ScenarioResult, reporting
from embedstream.tools.bench.figures import Percentiles, Row, latency_percentiles
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.workload import make_text, make_texts, poisson_arrivals

WARM_UP_ROUNDS = 3
# A scenario that has not finished this long after it should have is reported as it stands,
# its missing items counted as failed: a stuck provider must not hang the whole bench.
GRACE_S = 120.0


class Measured:
    """A fresh client on a recorded backend: warmed up on entry (uncounted), CPU metered
    from the end of the warm-up until :meth:`stop`, closed on exit."""

    def __init__(self, ctx: BenchContext, *, warm_up_texts: int | None = None) -> None:
        self.ctx = ctx
        self.backend = TimedBackend(ctx.embedder())
        self.client = ctx.make_client(self.backend, ctx.settings)
        self.cpu = CpuMeter(ctx.provider_cpu())
        slots = ctx.settings.max_concurrency
        self._warm_up = warm_up_texts if warm_up_texts is not None else 2 * slots

    async def __aenter__(self) -> Measured:
        rounds = WARM_UP_ROUNDS if self._warm_up > 1 else 1
        async with BatchingClient(_KeepOpen(self.backend), settings=self.ctx.settings) as warm:
            for r in range(rounds):
                texts = [f"warm-up {r} {k}" for k in range(self._warm_up)]
                await asyncio.gather(*(warm.embed(t) for t in texts))
        self.client.start()
        self.backend.restart()
        await self.ctx.reset_provider_stats()
        self.cpu.start()
        return self

    def stop(self) -> None:
        self.cpu.stop()

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.close(timeout_s=10.0)

    def row(
        self,
        *,
        scenario: str,
        kind: str,
        items: int,
        seconds: float,
        bound_per_s: float | None,
        latency: Percentiles | None,
        failed: int,
        offered_per_s: float | None = None,
        note: str = "",
    ) -> Row:
        return Row(
            scenario=scenario,
            kind=kind,
            items=items,
            seconds=seconds,
            bound_per_s=bound_per_s,
            latency=latency,
            calls=self.backend.calls,
            inputs=self.backend.inputs,
            client_cpu_s=self.cpu.client_s,
            provider_cpu_s=self.cpu.provider_s,
            failed=failed,
            offered_per_s=offered_per_s,
            note=note,
        )

    def result(self, row: Row) -> ScenarioResult:
        return ScenarioResult(row, self.backend.timeline(), self.backend.sizes_and_latencies_ms())


class _KeepOpen:
    """The warm-up client's view of the backend: closing it leaves the connections open."""

    def __init__(self, inner: EmbeddingBackend) -> None:
        self._inner = inner

    async def embed(self, call: BatchCall) -> BatchOutcome:
        return await self._inner.embed(call)

    async def close(self) -> None:
        return None


def summary(row: Row) -> str:
    """The one line a finished step shows."""
    share = f", {row.pct_of_bound:.0f}% of bound" if row.pct_of_bound is not None else ""
    p99 = f", P99 {row.latency.p99_ms:,.0f} ms" if row.latency else ""
    failed = f", {row.failed:,} FAILED" if row.failed else ""
    return f"{row.items_per_s:,.0f} items/s{share}{p99}{failed}"


async def closed_loop(
    ctx: BenchContext,
    callers: int,
    *,
    seconds: float | None,
    max_items: int | None = None,
    kind: str = "closed",
    warm_up_texts: int | None = None,
) -> ScenarioResult:
    """``callers`` loops of `await client.embed(text)` for ``seconds`` (or ``max_items``)."""
    loop = asyncio.get_running_loop()
    rng = random.Random(ctx.seed)
    latencies: list[float] = []
    issued = failed = 0
    label = f"{kind} {callers}"
    async with Measured(ctx, warm_up_texts=warm_up_texts) as run:
        start = loop.time()
        stop_at = start + seconds if seconds is not None else math.inf

        async def caller() -> None:
            nonlocal issued, failed
            while loop.time() < stop_at and (max_items is None or issued < max_items):
                text = make_text(rng, issued, ctx.tokens)
                issued += 1
                asked = loop.time()
                try:
                    await run.client.embed(text)
                except Exception:
                    failed += 1
                    continue
                latencies.append(loop.time() - asked)

        total, unit = (seconds, "s") if seconds is not None else (max_items, "items")
        progress = (lambda: loop.time() - start) if seconds is not None else (lambda: issued)
        async with reporting(ctx.progress, label, total, unit, progress):
            budget_s = (seconds or 0.0) + GRACE_S
            _, pending = await asyncio.wait(
                [asyncio.create_task(caller()) for _ in range(callers)], timeout=budget_s
            )
            for task in pending:
                task.cancel()
        elapsed = loop.time() - start
        run.stop()
    model = ctx.model
    bound = model.closed_loop_bound(callers, ctx.tokens) if model else None
    row = run.row(
        scenario=f"{kind} {callers} callers",
        kind=kind.replace(" ", "-"),
        items=len(latencies),
        seconds=elapsed,
        bound_per_s=bound,
        latency=latency_percentiles(latencies),
        failed=failed + len(pending),
        note="bound C/L(1)" if bound else "",
    )
    ctx.progress.end(summary(row))
    return run.result(row)


async def backlog(
    ctx: BenchContext, items: int, *, kind: str = "backlog", warm_up_texts: int | None = None
) -> ScenarioResult:
    """``items`` texts submitted at once (low priority, as bulk work is); latency runs from
    the submission of the first to each vector."""
    loop = asyncio.get_running_loop()
    texts = make_texts(items, tokens=ctx.tokens, seed=ctx.seed)
    async with Measured(ctx, warm_up_texts=warm_up_texts) as run:
        tracker = _Completions(len(texts))
        async with reporting(ctx.progress, f"{kind} {items:,}", items, "items", tracker.count):
            start = loop.time()
            for text in texts:
                run.client.submit(text, priority="low").add_done_callback(
                    functools.partial(tracker.done, start)
                )
            timed_out = not await tracker.wait(GRACE_S + items / 1000.0)
        elapsed = (max(tracker.finished_at) if tracker.finished_at else loop.time()) - start
        run.stop()
    bound = ctx.model.physical_bound(ctx.tokens) if ctx.model else None
    row = run.row(
        scenario=f"{kind} {items:,} at once",
        kind=kind.replace(" ", "-"),
        items=len(tracker.latencies),
        seconds=elapsed,
        bound_per_s=bound,
        latency=latency_percentiles(tracker.latencies),
        failed=items - len(tracker.latencies),
        note=("bound X_phys" if bound else "") + ("; timed out" if timed_out else ""),
    )
    ctx.progress.end(summary(row))
    return run.result(row)


async def open_loop(ctx: BenchContext, rate: float, seconds: float) -> ScenarioResult:
    """Poisson arrivals at ``rate``/s for ``seconds``, high priority (interactive traffic)."""
    loop = asyncio.get_running_loop()
    arrivals = poisson_arrivals(rate, seconds, seed=ctx.seed)
    texts = make_texts(len(arrivals), tokens=ctx.tokens, seed=ctx.seed)
    async with Measured(ctx) as run:
        tracker = _Completions(len(texts))
        label = f"open {rate:,.0f}/s"
        async with reporting(ctx.progress, label, len(texts), "items", tracker.count):
            start = loop.time() + 0.05  # a moment to get the generator going
            await _release(run.client, texts, [start + a for a in arrivals], tracker)
            timed_out = not await tracker.wait(GRACE_S)
        end = max(tracker.finished_at) if tracker.finished_at else loop.time()
        run.stop()
    row = run.row(
        scenario=f"open {rate:,.0f}/s",
        kind="open",
        items=len(tracker.latencies),
        seconds=end - start,
        bound_per_s=ctx.model.open_loop_bound(rate, ctx.tokens) if ctx.model else None,
        latency=latency_percentiles(tracker.latencies),
        failed=len(texts) - len(tracker.latencies),
        offered_per_s=rate,
        note="latency from the scheduled arrival" + ("; timed out" if timed_out else ""),
    )
    ctx.progress.end(summary(row))
    return run.result(row)


async def _release(
    client: LoadTarget, texts: Sequence[str], deadlines: Sequence[float], tracker: _Completions
) -> None:
    """Submit each text at its deadline (all those already due at once after a stall)."""
    loop = asyncio.get_running_loop()
    i = 0
    while i < len(texts):
        now = loop.time()
        if deadlines[i] > now:
            await asyncio.sleep(deadlines[i] - now)
            continue
        while i < len(texts) and deadlines[i] <= now:
            future = client.submit(texts[i], priority="high")
            future.add_done_callback(functools.partial(tracker.done, deadlines[i]))
            i += 1


class _Completions:
    """Counts finished futures: each success's latency from its reference time."""

    def __init__(self, expected: int) -> None:
        self._expected = expected
        self._finished = 0
        self._all_done = asyncio.Event()
        self.latencies: list[float] = []
        self.finished_at: list[float] = []
        if expected == 0:
            self._all_done.set()

    def count(self) -> float:
        return float(self._finished)

    @property
    def errors(self) -> int:
        """Futures that finished without a vector."""
        return self._finished - len(self.latencies)

    def done(self, since: float, future: asyncio.Future[object]) -> None:
        now = asyncio.get_running_loop().time()
        if not future.cancelled() and future.exception() is None:
            self.latencies.append(now - since)
            self.finished_at.append(now)
        self._finished += 1
        if self._finished >= self._expected:
            self._all_done.set()

    async def wait(self, timeout_s: float) -> bool:
        """True once every future finished; False after ``timeout_s``."""
        try:
            await asyncio.wait_for(self._all_done.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


@dataclass(frozen=True, slots=True)
class FloodFigures:
    low_items: int
    low_per_s: float  # the backlog's items over the time to its last vector
    high: Percentiles | None  # from each high request's scheduled arrival; None: no high
    high_items: int
    failed: int


async def flood_on(
    client: BatchingClient, low_texts: Sequence[str], high_rate: float, *, seed: int = 1
) -> FloodFigures:
    """Submit ``low_texts`` at once (priority low) on a started client, and high requests at
    ``high_rate``/s (Poisson; 0: none) until the backlog is drained."""
    loop = asyncio.get_running_loop()
    low = _Completions(len(low_texts))
    start = loop.time()
    for text in low_texts:
        client.submit(text, priority="low").add_done_callback(functools.partial(low.done, start))
    high = _Completions(0)
    generator = None
    if high_rate > 0:
        # Enough arrivals for any drain; the generator stops when the backlog is done.
        arrivals = poisson_arrivals(high_rate, GRACE_S, seed=seed)
        texts = [f"high {i} {t}" for i, t in enumerate(make_texts(len(arrivals), seed=seed))]
        high = _Completions(len(texts))
        deadlines = [start + 0.05 + a for a in arrivals]
        generator = asyncio.create_task(_release(client, texts, deadlines, high))
    await low.wait(GRACE_S + len(low_texts) / 1000.0)
    end = max(low.finished_at) if low.finished_at else loop.time()
    if generator is not None:
        generator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await generator
        await asyncio.sleep(1.0)  # the high requests sent before the end get their answers
    return FloodFigures(
        low_items=len(low.latencies),
        low_per_s=len(low.latencies) / (end - start),
        high=latency_percentiles(high.latencies) if high_rate > 0 else None,
        high_items=len(high.latencies),
        failed=len(low_texts) - len(low.latencies) + high.errors,
    )


async def endpoint(ctx: BenchContext, callers: int, budget: int) -> list[ScenarioResult]:
    """A real endpoint within ``budget`` texts: one warm-up text, then a closed loop and a
    backlog sharing the rest. No bound: its latency model is unknown (the report fits one)."""
    spendable = budget - 1
    closed_items = spendable // 2
    results = []
    if closed_items >= 1:
        results.append(
            await closed_loop(
                ctx,
                min(callers, closed_items),
                seconds=None,
                max_items=closed_items,
                kind="endpoint closed",
                warm_up_texts=1,
            )
        )
    backlog_items = spendable - closed_items - (1 if closed_items >= 1 else 0)
    if backlog_items >= 1:
        results.append(await backlog(ctx, backlog_items, kind="endpoint backlog", warm_up_texts=1))
    return results
