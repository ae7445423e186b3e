"""Every provider call as the client saw it, and the CPU a scenario used.

:class:`TimedBackend` wraps the real embedder: the engine and the processor call it exactly
as they would call the embedder, so the calls, their sizes and latencies are those of the
code under test, whichever path (in process or Kafka) made them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from embedstream.engine.backend import BatchCall, BatchOutcome, EmbeddingBackend

Clock = Callable[[], float]
CpuReader = Callable[[], float | None]


@dataclass(frozen=True, slots=True)
class CallSample:
    at_s: float  # the call's start, seconds since the recorder's origin
    items: int
    latency_s: float
    ok: bool


class TimedBackend:
    """An EmbeddingBackend that records each call of the one it wraps."""

    def __init__(self, inner: EmbeddingBackend, clock: Clock = time.perf_counter) -> None:
        self._inner = inner
        self._clock = clock
        self._origin = clock()
        self.samples: list[CallSample] = []

    def restart(self) -> None:
        """Forget the calls so far (a warm-up's) and count time from now."""
        self._origin = self._clock()
        self.samples = []

    async def embed(self, call: BatchCall) -> BatchOutcome:
        started = self._clock()
        ok = False
        try:
            outcome = await self._inner.embed(call)
            ok = True
            return outcome
        finally:
            self.samples.append(
                CallSample(started - self._origin, len(call.texts), self._clock() - started, ok)
            )

    async def close(self) -> None:
        await self._inner.close()

    @property
    def calls(self) -> int:
        return len(self.samples)

    @property
    def inputs(self) -> int:
        return sum(s.items for s in self.samples)

    def timeline(self) -> list[tuple[float, int]]:
        """(start s, inputs) of each call: the batch size over time."""
        return [(s.at_s, s.items) for s in self.samples]

    def sizes_and_latencies_ms(self) -> list[tuple[int, float]]:
        """(inputs, latency ms) of each successful call, to fit L(b)."""
        return [(s.items, 1000.0 * s.latency_s) for s in self.samples if s.ok]


class CpuMeter:
    """CPU seconds of this process (every thread) and of the provider's process, between
    :meth:`start` and :meth:`stop`."""

    def __init__(self, provider_cpu: CpuReader | None = None) -> None:
        self._provider_cpu = provider_cpu
        self._client_start = 0.0
        self._provider_start: float | None = None
        self.client_s = 0.0
        self.provider_s: float | None = None

    def start(self) -> None:
        self._client_start = time.process_time()
        self._provider_start = self._provider_cpu() if self._provider_cpu else None

    def stop(self) -> None:
        self.client_s = time.process_time() - self._client_start
        now = self._provider_cpu() if self._provider_cpu else None
        if now is not None and self._provider_start is not None:
            self.provider_s = now - self._provider_start
