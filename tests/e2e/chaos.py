"""A typed harness for chaos tests of delivery guarantees, in the style of Kafka's system tests.

Real `embedstream run` processes (subprocesses that can be SIGKILLed, SIGTERMed, SIGSTOPped),
a feeder publishing requests at a steady rate while faults happen, a watcher of the group's
committed offsets, and a drain helper that waits for the group to catch up and then compares
the whole output with the input set through :func:`embedstream.tools.verify.app.verify`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import os
import random
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
import orjson
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from embedstream.kafka.admin import topic_names
from embedstream.kafka.clients import admin_for, producer_for
from embedstream.settings import load_settings
from embedstream.tools.verify.app import verify
from embedstream.tools.verify.report import VerificationReport

from tests.integration.helpers import committed_lag

DEFAULT_MODEL = load_settings(env={}).model
ASSIGNED = "partitions assigned:"
# Lines that betray an unhandled error in a processor's log.
UNHANDLED = ("Traceback", "Task exception was never retrieved")
# Lines exactly-once members must never log: aiokafka's assertion when a broken transactional
# producer is reused, errors nobody handled, clients never closed.
UNTIDY = ("Invalid state transition", "Future exception was never retrieved", "Unclosed")
LOG_TAIL_CHARS = 6000
NOISE = "HTTP Request:"  # httpx logs every call at INFO
REPO = Path(__file__).resolve().parents[2]  # processors run this working tree's `stream`


def figures(title: str, **values: object) -> str:
    """One line of test figures, printed so that `pytest -s` shows them."""
    text = f"[chaos] {title}: " + ", ".join(f"{k}={v}" for k, v in values.items())
    print(text, flush=True)
    return text


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class ProcessorOptions:
    """What every processor of a test shares; `ProcessorProcess` adds name and metrics port."""

    bootstrap: str
    prefix: str
    group: str
    base_url: str
    max_buffered_items: int = 500
    max_batch_size: int = 64
    max_concurrency: int = 4
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    commit_interval_ms: int = 200
    extra_args: tuple[str, ...] = ()

    @property
    def in_flight_items(self) -> int:
        """Most items inside embeddings calls at once."""
        return self.max_concurrency * self.max_batch_size


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: have the kernel SIGKILL it when the test process dies,
    so a test stopped by its timeout leaves no processor consuming from the shared broker."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessorProcess:
    """One `embedstream run` subprocess. Every incarnation appends to the same log file."""

    def __init__(
        self, name: str, options: ProcessorOptions, log_dir: Path, *, metrics_port: int = 0
    ) -> None:
        self.name = name
        self.options = options
        self.metrics_port = metrics_port
        self.log_path = log_dir / f"{name}.log"
        self.starts = 0
        self.exit_codes: list[int] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._log_offset = 0  # where the current incarnation's output begins

    def command(self) -> list[str]:
        o = self.options
        return [
            sys.executable, "-m", "embedstream.cli", "run",
            "--bootstrap-servers", o.bootstrap,
            "--topic-prefix", o.prefix,
            "--group-id", o.group,
            "--client-id", f"chaos-{self.name}",
            "--base-url", o.base_url,
            "--metrics-port", str(self.metrics_port),
            "--session-timeout-ms", str(o.session_timeout_ms),
            "--heartbeat-interval-ms", str(o.heartbeat_interval_ms),
            "--commit-interval-ms", str(o.commit_interval_ms),
            "--max-buffered-items", str(o.max_buffered_items),
            "--max-batch-size", str(o.max_batch_size),
            "--max-concurrency", str(o.max_concurrency),
            "--fetch-max-wait-ms", "50",
            "--max-wait-ms", "20",
            *o.extra_args,
        ]  # fmt: skip

    async def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        # Hermetic: no EMBEDSTREAM_* or OPENAI_* setting of the caller leaks in.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDSTREAM_", "OPENAI_"))}
        env["PYTHONUNBUFFERED"] = "1"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(
                f"===== {self.name} start #{self.starts} at {time.time():.3f} =====\n".encode()
            )
            log.flush()
            self._log_offset = log.tell()
            self._proc = await asyncio.create_subprocess_exec(
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=REPO,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    def _signal(self, sig: signal.Signals) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            raise RuntimeError(f"{self.name} is not running")
        self._proc.send_signal(sig)
        return self._proc

    async def sigkill(self) -> int:
        proc = self._signal(signal.SIGKILL)
        code = await asyncio.wait_for(proc.wait(), 30)
        self.exit_codes.append(code)
        return code

    async def sigterm(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, then wait (bounded) for the exit code. A process still running after
        `timeout_s` is SIGKILLed and the test fails."""
        return await self.stop_with(signal.SIGTERM, timeout_s)

    async def stop_with(self, sig: signal.Signals, timeout_s: float = 60.0) -> int:
        """Send `sig`, then wait (bounded) for the exit code, as `sigterm`."""
        proc = self._signal(sig)
        try:
            code = await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            await self.sigkill()
            raise AssertionError(
                f"{self.name} did not exit within {timeout_s:g}s of {sig.name}\n{self.log_tail()}"
            ) from None
        self.exit_codes.append(code)
        return code

    def send_signal(self, sig: signal.Signals) -> None:
        """Send `sig` and return at once."""
        self._signal(sig)

    def sigstop(self) -> None:
        self._signal(signal.SIGSTOP)

    def sigcont(self) -> None:
        self._signal(signal.SIGCONT)

    def rss_bytes(self) -> int | None:
        """Resident set size now (VmRSS), or None when the process is gone."""
        if not self.alive or self.pid is None:
            return None
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        match = re.search(r"^VmRSS:\s+(\d+)\s+kB", status, re.MULTILINE)
        return int(match.group(1)) * 1024 if match else None

    # -- logs -------------------------------------------------------------------------------

    def log_text(self, *, current_only: bool = False) -> str:
        try:
            with self.log_path.open("rb") as log:
                if current_only:
                    log.seek(self._log_offset)
                return log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The end of the log, without the HTTP client's line per embeddings call."""
        lines = [line for line in self.log_text().splitlines() if NOISE not in line]
        text = "\n".join(lines)
        return (
            f"--- {self.log_path} (last {chars} chars, {NOISE!r} lines left out) ---\n"
            + (text[-chars:])
        )

    def assignments(self, *, current_only: bool = True) -> list[str]:
        """The "partitions assigned" log lines, one per rebalance this member took part in."""
        return [
            line for line in self.log_text(current_only=current_only).splitlines()
            if ASSIGNED in line
        ]  # fmt: skip

    def unhandled_errors(self) -> list[str]:
        return self.lines_with(UNHANDLED)

    def lines_with(self, markers: Iterable[str]) -> list[str]:
        """Every line of every incarnation's log that contains one of `markers`."""
        found = tuple(markers)
        return [line for line in self.log_text().splitlines() if any(m in line for m in found)]

    async def wait_assigned(
        self, *, count: int = 1, nonempty: bool = False, timeout_s: float = 60.0
    ) -> None:
        """Until the current incarnation has logged `count` assignments (the last one holding
        partitions when `nonempty`). Fails if the process exits meanwhile."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lines = self.assignments()
            if len(lines) >= count and (not nonempty or not lines[-1].rstrip().endswith("[]")):
                return
            if not self.alive:
                raise AssertionError(
                    f"{self.name} exited ({self.returncode}) before joining\n{self.log_tail()}"
                )
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} not assigned within {timeout_s:g}s\n{self.log_tail()}")


class Fleet:
    """The processors of one test. Leaving the `async with` block SIGKILLs whatever still runs
    and, when the block failed, prints every processor's log tail."""

    def __init__(self, options: ProcessorOptions, log_dir: Path) -> None:
        self.options = options
        self.log_dir = log_dir
        self.processes: list[ProcessorProcess] = []

    def add(self, name: str | None = None, *, metrics_port: int = 0) -> ProcessorProcess:
        proc = ProcessorProcess(
            name or f"p{len(self.processes)}", self.options, self.log_dir, metrics_port=metrics_port
        )
        self.processes.append(proc)
        return proc

    async def start(self, count: int) -> list[ProcessorProcess]:
        """Add and start `count` processors, then wait until each has joined the group."""
        started = [self.add() for _ in range(count)]
        for proc in started:
            await proc.start()
        for proc in started:
            await proc.wait_assigned()
        return started

    @property
    def alive(self) -> list[ProcessorProcess]:
        return [p for p in self.processes if p.alive]

    def unhandled_errors(self) -> dict[str, list[str]]:
        return self.lines_with(UNHANDLED)

    def lines_with(self, markers: Iterable[str]) -> dict[str, list[str]]:
        """Per processor, its log lines containing one of `markers` (only those with some)."""
        found = {p.name: p.lines_with(markers) for p in self.processes}
        return {name: lines for name, lines in found.items() if lines}

    async def stop_all(self, timeout_s: float = 60.0) -> list[int]:
        """SIGTERM every running processor, one after another; their exit codes."""
        return [await proc.sigterm(timeout_s) for proc in self.alive]

    def log_tails(self, chars: int = LOG_TAIL_CHARS) -> str:
        return "\n".join(p.log_tail(chars) for p in self.processes)

    async def kill_all(self) -> None:
        for proc in self.alive:
            with contextlib.suppress(ProcessLookupError, RuntimeError, TimeoutError):
                await proc.sigkill()

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.kill_all()
        if exc is not None:
            print(f"\n[chaos] processor logs ({self.log_dir}):\n{self.log_tails()}", flush=True)


# --------------------------------------------------------------------------- monitoring


class Sampling:
    """A sampling loop that runs for the duration of an `async with` block."""

    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class RssMonitor(Sampling):
    """Samples the resident memory of processes every `interval_s` and keeps the peaks."""

    def __init__(
        self, processes: Callable[[], Iterable[ProcessorProcess]], interval_s: float = 0.25
    ):
        self._processes = processes
        self._interval_s = interval_s
        self.peak_by_name: dict[str, int] = {}

    @property
    def peak_bytes(self) -> int:
        return max(self.peak_by_name.values(), default=0)

    @property
    def peak_mib(self) -> float:
        return round(self.peak_bytes / 2**20, 1)

    def sample(self) -> None:
        for proc in self._processes():
            rss = proc.rss_bytes()
            if rss is not None and rss > self.peak_by_name.get(proc.name, 0):
                self.peak_by_name[proc.name] = rss

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self._interval_s)


async def scrape_metrics(port: int, timeout_s: float = 2.0) -> dict[str, float]:
    """A processor's /metrics, each sample name summed over its label sets."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
        response.raise_for_status()
        text = await response.text()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        with contextlib.suppress(ValueError):
            values[name] = values.get(name, 0.0) + float(value)
    return values


class MetricsSampler(Sampling):
    """Scrapes a processor's /metrics every `interval_s` (see :func:`scrape_metrics`) and keeps
    every sample with its monotonic time, so peaks can be taken over a window."""

    def __init__(self, port: int, interval_s: float = 0.2) -> None:
        self._port = port
        self._interval_s = interval_s
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.failures = 0

    def peak(self, name: str, *, since: float = 0.0, until: float = math.inf) -> float:
        return max((v.get(name, 0.0) for t, v in self.samples if since <= t <= until), default=0.0)

    def last(self, name: str) -> float:
        return self.samples[-1][1].get(name, 0.0) if self.samples else 0.0

    async def _run(self) -> None:
        while True:
            try:
                values = await scrape_metrics(self._port)
            except (aiohttp.ClientError, TimeoutError, OSError):
                self.failures += 1  # not serving yet, or gone
            else:
                self.samples.append((time.monotonic(), values))
            await asyncio.sleep(self._interval_s)


# --------------------------------------------------------------------------- feeding


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


class CommitWatcher(Sampling):
    """Polls a group's committed offsets every `interval_s` and records, per partition,
    whether a committed offset ever went down. Errors (no coordinator while a broker restarts,
    connection refused) are counted and the admin client is rebuilt."""

    def __init__(self, bootstrap: str, group: str, interval_s: float = 0.2) -> None:
        self._bootstrap = bootstrap
        self._group = group
        self._interval_s = interval_s
        self.last: dict[TopicPartition, int] = {}
        self.decreased: dict[TopicPartition, bool] = {}
        self.decreases: list[tuple[TopicPartition, int, int]] = []
        self.polls = 0
        self.errors = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def ever_decreased(self) -> bool:
        return any(self.decreased.values())

    def observe(self, offsets: dict[TopicPartition, int]) -> None:
        self.polls += 1
        for tp, offset in offsets.items():
            if offset < 0:
                continue  # no commit for this partition
            previous = self.last.get(tp)
            if previous is not None and offset < previous:
                self.decreases.append((tp, previous, offset))
                self.decreased[tp] = True
            else:
                self.decreased.setdefault(tp, False)
            self.last[tp] = offset

    async def _run(self) -> None:
        admin: Any = None
        try:
            while True:
                try:
                    if admin is None:
                        admin = admin_for(self._bootstrap, request_timeout_ms=5000)
                        await admin.start()
                    found = await asyncio.wait_for(
                        admin.list_consumer_group_offsets(self._group), 10
                    )
                    self.observe({tp: meta.offset for tp, meta in found.items()})
                except (KafkaError, OSError, TimeoutError):
                    self.errors += 1
                    if admin is not None:
                        with contextlib.suppress(Exception):
                            await admin.close()
                        admin = None
                    await asyncio.sleep(0.5)
                await asyncio.sleep(self._interval_s)
        finally:
            if admin is not None:
                with contextlib.suppress(Exception):
                    await admin.close()


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
) -> Drained:
    """Wait until the feeder is done, the group's committed lag on the input topics (both
    request lanes and the retry topic) is 0 and the verifier reports no lost ids; all within
    `timeout_s`. Lag 0 with ids still lost twice in a row, some seconds apart, is a verdict
    (commits moved past requests without an outcome): the report is returned for the test to
    assert on. Raises AssertionError when the time runs out, with `describe()` appended."""
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
        if lost_at_zero_lag is not None and now - lost_at_zero_lag >= 3.0:
            return Drained(report, lag, round(now - fed, 1), verifications, notes)
        lost_at_zero_lag = lost_at_zero_lag or now
        await asyncio.sleep(1.0)
    summary = report.summary() if report is not None else "never verified (lag never 0)"
    raise AssertionError(
        f"not drained within {timeout_s:g}s: committed lag {lag}; {summary}\n{describe()}"
    )


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
