"""Embedding backends for tests and benchmarks: a recording in-memory provider and its vectors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import EmbedStreamError, PermanentItemError, Reason
from embedstream.wire.openai import Input


@dataclass
class RecordingBackend:
    """An in-memory provider: each text's vector is ``[len(text), index-free marker]``.

    ``latency_s`` simulates call time; ``fail`` may raise for a call (e.g. to reject any
    batch holding a marked text, like a provider naming no item in its 400).
    """

    latency_s: float = 0.0
    fail: Callable[[BatchCall], EmbedStreamError | None] | None = None
    calls: list[BatchCall] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0

    async def embed(self, call: BatchCall) -> BatchOutcome:
        self.calls.append(call)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            error = self.fail(call) if self.fail else None
            if error is not None:
                raise error
            vectors: list[list[float] | str] = [vector_for(t) for t in call.texts]
            return BatchOutcome(vectors, 2, sum(len(t) for t in call.texts), self.latency_s)
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        return None


def texts_of(call: BatchCall) -> tuple[str, ...]:
    """A call's inputs as texts (for fakes that only ever see texts)."""
    texts = tuple(t for t in call.texts if isinstance(t, str))
    assert len(texts) == len(call.texts), "a call of token ids reached a text-only fake"
    return texts


def vector_for(text: Input) -> list[float]:
    """A cheap vector that still tells texts apart (for checking fan-out and attribution);
    token ids get the negative of their sum, so they never match a text's."""
    if isinstance(text, tuple):
        return [float(len(text)), -float(sum(text[:64]))]
    return [float(len(text)), float(sum(map(ord, text[:64])))]


def reject_texts_containing(marker: str) -> Callable[[BatchCall], EmbedStreamError | None]:
    """A provider that rejects a whole batch (400 naming no item) if any text has `marker`."""

    def check(call: BatchCall) -> EmbedStreamError | None:
        if any(isinstance(text, str) and marker in text for text in call.texts):
            return PermanentItemError(Reason.REJECTED, "provider rejected the input (400)")
        return None

    return check
