"""What every scenario of `embedstream bench` is given, and what each gives back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from embedstream.engine.backend import EmbeddingBackend
from embedstream.engine.client import BatchingClient, Vector
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.settings import Settings
from embedstream.tools.bench.figures import LatencyModel, Row
from embedstream.tools.bench.processes import SimulatorProcess
from embedstream.tools.progress import StepProgress

PROGRESS_INTERVAL_S = 0.25


class LoadTarget(Protocol):
    """What the in-process scenarios drive: `BatchingClient`, or a baseline batcher with its
    surface (bench/bench_tails.py's static batcher) under the same load."""

    def start(self) -> None: ...

    async def close(self, timeout_s: float | None = None) -> None: ...

    async def embed(self, text: str) -> Vector: ...

    def submit(
        self, text: str, *, priority: Literal["high", "low"] = "high"
    ) -> asyncio.Future[Vector]: ...


ClientFactory = Callable[[EmbeddingBackend, Settings], LoadTarget]


def batching_client(backend: EmbeddingBackend, settings: Settings) -> LoadTarget:
    return BatchingClient(backend, settings=settings)


@dataclass
class BenchContext:
    settings: Settings  # the engine's settings; base_url is the provider under test
    model: LatencyModel | None  # the simulator's model; None for a real endpoint
    tokens: int  # simulator tokens per text
    seed: int
    progress: StepProgress
    log_dir: Path
    provider: SimulatorProcess | None = None  # None for a real endpoint
    sdk: bool = False  # the openai SDK's HTTP path instead of the lean one (before/after A/B)
    # What the in-process scenarios measure on the embedder; the engine unless a baseline's.
    make_client: ClientFactory = batching_client

    def embedder(self, settings: Settings | None = None) -> OpenAIEmbedder:
        """The embedder under test for ``settings`` (default: the context's)."""
        return OpenAIEmbedder.from_settings(settings or self.settings, sdk=self.sdk)

    def provider_cpu(self) -> Callable[[], float | None] | None:
        return self.provider.cpu_s if self.provider is not None else None

    async def reset_provider_stats(self) -> None:
        if self.provider is not None:
            await self.provider.reset_stats()


@dataclass(frozen=True)
class ScenarioResult:
    row: Row
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (s, inputs) per call
    calls: list[tuple[int, float]] = field(default_factory=list)  # (inputs, ms) per ok call


@contextlib.asynccontextmanager
async def reporting(
    progress: StepProgress, label: str, total: float | None, unit: str, done: Callable[[], float]
) -> AsyncIterator[None]:
    """A progress step for the block, updated from ``done()`` a few times a second."""
    progress.begin(label, total, unit)

    async def tick() -> None:
        while True:
            progress.update(done())
            await asyncio.sleep(PROGRESS_INTERVAL_S)

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
