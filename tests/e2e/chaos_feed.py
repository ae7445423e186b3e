"""The input and the verdict of chaos tests: a feeder publishing requests at a steady rate
while faults happen, and a drain helper that waits for the group to catch up and then compares
the whole output with the input set through :func:`embedstream.tools.verify.app.verify`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.client.clients import producer_for
from embedstream.tools.verify.app import verify
from embedstream.tools.verify.report import VerificationReport

from tests.e2e.chaos import DEFAULT_MODEL, figures
from tests.e2e.lost_diagnosis import diagnose_lost, open_transactions
from tests.integration.helpers import committed_lag


def chaos_text(index: int, seed: int = 0) -> str:
    """A deterministic text of 4 to 40 words for request `index`."""
    rng = random.Random(seed * 1_000_003 + index)
    words = rng.choices(_WORDS, k=rng.randint(4, 40))
    return f"item {index}: " + " ".join(words)


_VOCABULARY = (
    "kafka partition offset commit broker leader replica consumer group rebalance embedding "
    "vector batch latency throughput backpressure retry dead letter provider model token "
    "stream record header key value timeout failure recovery chaos monkey signal process"
)
_WORDS = _VOCABULARY.split()


class Feeder:
    """Publishes `count` requests (unique ids, deterministic texts, every fifth one high
    priority, the rest low) at `rate_per_s` in the background, acks=all. A send that fails
    (e.g. while the broker is down) is sent again, so every id is delivered at least once;
    `resent` counts those, and an id may then appear twice in the request topics."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        *,
        count: int,
        rate_per_s: float,
        id_prefix: str = "c",
        high_every: int = 5,
        seed: int = 0,
    ) -> None:
        names = topic_names(prefix)
        self._bootstrap = bootstrap
        self._high_topic = names.requests_high
        self._low_topic = names.requests_low
        self._rate = rate_per_s
        self._high_every = high_every
        self._seed = seed
        self.ids = [f"{id_prefix}{i:06d}" for i in range(count)]
        self.done = asyncio.Event()
        self.delivered = 0
        self.resent = 0
        self.send_errors = 0
        self.started_at = 0.0
        self.finished_at = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def high_count(self) -> int:
        return sum(1 for i in range(self.count) if self._is_high(i))

    def _is_high(self, index: int) -> bool:
        return index % self._high_every == 0

    def record(self, index: int) -> tuple[str, bytes, bytes | None]:
        """(topic, key, value) of event `index`; a None value is a tombstone."""
        rid = self.ids[index]
        topic = self._high_topic if self._is_high(index) else self._low_topic
        value = orjson.dumps({"id": rid, "text": chaos_text(index, self._seed)})
        return topic, rid.encode(), value

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def wait(self, timeout_s: float) -> None:
        """Until every request was acknowledged; re-raises the feeder's own failure."""
        assert self._task is not None, "feeder not started"
        done = asyncio.ensure_future(self.done.wait())
        finished, _ = await asyncio.wait({done, self._task}, timeout=timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        done.cancel()
        if self._task in finished:
            self._task.result()
        if not self.done.is_set():
            raise AssertionError(
                f"feeder delivered {self.delivered}/{self.count} within {timeout_s:g}s"
            )

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> Feeder:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self) -> None:
        producer = producer_for(
            self._bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=20_000,
            retry_backoff_ms=200,
        )
        await _start_with_retry(producer.start, 60)
        try:
            await self._publish(producer)
        finally:
            await producer.stop()

    async def _publish(self, producer: Any) -> None:
        pending: list[tuple[int, asyncio.Future[Any]]] = []
        failed: list[int] = []
        acked = [False] * self.count
        self.started_at = time.monotonic()
        next_index = 0
        tick_s = 0.02
        while self.delivered < self.count:
            due = min(self.count, int((time.monotonic() - self.started_at) * self._rate) + 1)
            todo = failed + list(range(next_index, due))
            failed = []
            next_index = max(next_index, due)
            for position, index in enumerate(todo):
                topic, key, value = self.record(index)
                try:
                    future = await producer.send(topic, value, key=key)
                except KafkaError:
                    self.send_errors += 1
                    failed.extend(todo[position:])
                    await asyncio.sleep(0.5)
                    break
                pending.append((index, future))
            still: list[tuple[int, asyncio.Future[Any]]] = []
            for index, future in pending:
                if not future.done():
                    still.append((index, future))
                elif future.cancelled() or future.exception() is not None:
                    self.send_errors += 1
                    self.resent += 1
                    failed.append(index)
                elif not acked[index]:
                    acked[index] = True
                    self.delivered += 1
            pending = still
            await asyncio.sleep(tick_s)
        self.finished_at = time.monotonic()
        self.done.set()

    @property
    def duration_s(self) -> float:
        end = self.finished_at or time.monotonic()
        return round(end - self.started_at, 1) if self.started_at else 0.0


async def _start_with_retry(start: Callable[[], Awaitable[None]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await start()
            return
        except (KafkaError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


# --------------------------------------------------------------------------- offsets


def input_topics(prefix: str) -> list[str]:
    names = topic_names(prefix)
    return [names.requests_high, names.requests_low, names.retry]


# --------------------------------------------------------------------------- draining


@dataclass
class Drained:
    report: VerificationReport
    lag: dict[str, int]
    drain_s: float  # from the feeder's last acknowledgement to the verdict
    verifications: int
    notes: list[str] = field(default_factory=list)
    diagnosis: str = ""  # where the lost requests went (tests/e2e/lost_diagnosis.py)

    def explain(self) -> str:
        """The verdict, and where the lost requests went: the failure message."""
        return f"{self.report.summary()}\n{self.diagnosis}"


async def run_until_drained(
    bootstrap: str,
    prefix: str,
    group: str,
    feeder: Feeder,
    *,
    timeout_s: float,
    check_vectors: bool = True,
    max_duplicates: int = 10**9,
    default_model: str = DEFAULT_MODEL,
    describe: Callable[[], str] = lambda: "",
    logs: Sequence[Path] = (),
) -> Drained:
    """Wait until the feeder is done, the group's committed lag on the input topics (both
    request lanes and the retry topic) is 0 and the verifier reports no lost ids; all within
    `timeout_s`. Lag 0 with ids still lost twice in a row, some seconds apart, is a verdict
    (commits moved past requests without an outcome): the report is returned for the test to
    assert on, with a diagnosis (`logs`: the members' log files to pick lines from). Not while
    a transaction is open on the results topic: it hides every result after it from a
    committed read (until its producer's successor fences it, or its timeout aborts it), so
    that is waited out. Raises AssertionError when the time runs out, with `describe()`
    appended."""
    started = time.monotonic()
    deadline = started + timeout_s
    await feeder.wait(max(1.0, deadline - time.monotonic()))
    fed = time.monotonic()
    topics = input_topics(prefix)
    lag: dict[str, int] = {}
    report: VerificationReport | None = None
    verifications = 0
    lost_at_zero_lag: float | None = None
    notes: list[str] = []
    while time.monotonic() < deadline:
        try:
            lag = await asyncio.wait_for(committed_lag(bootstrap, group, topics), 15)
        except (KafkaError, OSError, TimeoutError) as exc:
            notes.append(f"lag check failed: {type(exc).__name__}")
            await asyncio.sleep(1.0)
            continue
        if any(lag.values()):
            await asyncio.sleep(0.5)
            continue
        report = await verify(
            bootstrap,
            prefix,
            check_vectors=check_vectors,
            default_model=default_model,
            max_duplicates=max_duplicates,
            timeout_s=max(30.0, deadline - time.monotonic()),
        )
        verifications += 1
        if not report.lost:
            return Drained(report, lag, round(time.monotonic() - fed, 1), verifications, notes)
        now = time.monotonic()
        hiding = await _open_results_transactions(bootstrap, prefix)
        if hiding:  # no verdict while an open transaction hides results from the committed read
            notes.append(f"lost {len(report.lost)} at lag 0 behind open transactions {hiding}")
            lost_at_zero_lag = None
            await asyncio.sleep(1.0)
            continue
        if lost_at_zero_lag is not None and now - lost_at_zero_lag >= 3.0:
            try:
                diagnosis = await diagnose_lost(bootstrap, prefix, group, report.lost, logs)
            except Exception as exc:  # the verdict stands without it
                diagnosis = f"no diagnosis: {exc!r}"
            print(f"\n[chaos] lost requests:\n{diagnosis}", flush=True)
            return Drained(report, lag, round(now - fed, 1), verifications, notes, diagnosis)
        lost_at_zero_lag = lost_at_zero_lag or now
        await asyncio.sleep(1.0)
    summary = report.summary() if report is not None else "never verified (lag never 0)"
    raise AssertionError(
        f"not drained within {timeout_s:g}s: committed lag {lag}; {summary}\n"
        f"notes: {notes[-5:]}\n{describe()}"
    )


async def _open_results_transactions(bootstrap: str, prefix: str) -> dict[str, int]:
    try:
        return await asyncio.wait_for(open_transactions(bootstrap, topic_names(prefix).results), 15)
    except (KafkaError, OSError, TimeoutError):
        return {}  # unknown: the verdict stands on the reads alone


def report_figures(title: str, feeder: Feeder, drained: Drained, **extra: object) -> str:
    r = drained.report
    return figures(
        title,
        events=feeder.count,
        resent=feeder.resent,
        lost=len(r.lost),
        duplicate_ids=len(r.duplicates),
        duplicate_results=r.duplicate_results,
        misattributed=len(r.misattributed),
        in_both=len(r.in_both),
        dead_letters=r.dead_letters,
        results=r.results,
        feed_s=feeder.duration_s,
        drain_s=drained.drain_s,
        **extra,
    )
