"""Watchers for chaos tests: resident memory, /metrics scrapes, the group's committed offsets.

Each runs in the background while faults happen (:class:`Sampling`), and the test reads what
it saw afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, Self

import aiohttp
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from embedstream.kafka.client.clients import admin_for

from tests.e2e.chaos import ProcessorProcess

SAMPLER_STOP_S = 10.0


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
            # Bounded: a sampler's own clean-up (an admin client's close) once held a churn
            # test's teardown past its time bound after every check had passed.
            await asyncio.wait({self._task}, timeout=SAMPLER_STOP_S)


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
                    await asyncio.wait_for(admin.close(), SAMPLER_STOP_S)
