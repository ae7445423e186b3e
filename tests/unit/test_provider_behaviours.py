"""One table of provider behaviours, run through both users of the batch-call path: the Kafka
processor (on the in-memory fakes) and the in-process BatchingClient. Each text must end the
same way in both: a vector, or a dead letter / exception with the same reason."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    TransientError,
    http_reason,
)
from embedstream.testing import eventually, vector_for
from embedstream.testing.backends import texts_of
from embedstream.wire import headers_dict

from tests.unit.harness import LOW, NAMES, running

# (call number, texts) -> the error the provider answers with, or None to succeed.
Script = Callable[[int, tuple[str, ...]], Exception | None]

TEXTS = ("alpha", "beta", "BAD gamma", "delta")
SETTINGS: dict[str, Any] = {
    "max_attempts": 3,
    "retry_backoff_base_ms": 10.0,
    "retry_backoff_cap_ms": 40.0,
    "max_wait_ms": 0.0,
    "max_batch_size": 8,
}


def first_calls_fail(n: int, error: Callable[[], EmbedStreamError]) -> Script:
    return lambda call, texts: error() if call < n else None


def rejects_bad(call: int, texts: tuple[str, ...]) -> EmbedStreamError | None:
    if any("BAD" in t for t in texts):
        return PermanentItemError(Reason.REJECTED, "provider rejected the input (400)")
    return None


def crashes_on_bad(call: int, texts: tuple[str, ...]) -> Exception | None:
    """A bug rather than an answer: the backend raises something no provider error maps to."""
    return TypeError("unsupported operand") if any("BAD" in t for t in texts) else None


BEHAVIOURS: dict[str, tuple[Script, dict[str, str]]] = {
    "429 with retry-after, then success": (
        first_calls_fail(
            1, lambda: TransientError(Reason.RATE_LIMITED, "slow down", retry_after=0.05)
        ),
        dict.fromkeys(TEXTS, "vector"),
    ),
    "500, then success": (
        first_calls_fail(1, lambda: TransientError(http_reason(500), "oops")),
        dict.fromkeys(TEXTS, "vector"),
    ),
    "timeout, then success": (
        first_calls_fail(1, lambda: TransientError(Reason.TIMEOUT, "timed out")),
        dict.fromkeys(TEXTS, "vector"),
    ),
    "401 twice, then the key is accepted": (
        first_calls_fail(2, lambda: ProviderWideError(Reason.AUTH, "bad key (401)")),
        dict.fromkeys(TEXTS, "vector"),
    ),
    "400 on one item": (
        rejects_bad,
        {**dict.fromkeys(TEXTS, "vector"), "BAD gamma": Reason.REJECTED.value},
    ),
    "an unexpected exception on one item": (
        crashes_on_bad,
        {**dict.fromkeys(TEXTS, "vector"), "BAD gamma": Reason.INTERNAL_ERROR.value},
    ),
}


@dataclass
class ScriptedBackend:
    script: Script
    calls: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)

    async def embed(self, call: BatchCall) -> BatchOutcome:
        texts = texts_of(call)
        self.calls.append((time.monotonic(), texts))
        error = self.script(len(self.calls) - 1, texts)
        if error is not None:
            raise error
        return BatchOutcome([vector_for(t) for t in texts], 2, len(texts), 0.001)

    async def close(self) -> None:
        return None


async def through_the_client(backend: ScriptedBackend) -> dict[str, str]:
    async with BatchingClient(backend, **SETTINGS) as client:
        answers = await asyncio.gather(
            *(client.embed(text) for text in TEXTS), return_exceptions=True
        )
    return {
        text: answer.reason if isinstance(answer, EmbedStreamError) else "vector"
        for text, answer in zip(TEXTS, answers, strict=True)
    }


async def through_kafka(backend: ScriptedBackend) -> dict[str, str]:
    async with running(backend, **SETTINGS) as h:
        by_id = {f"id{i}": text for i, text in enumerate(TEXTS)}
        for request_id, text in by_id.items():
            h.request(LOW, request_id, text)

        def outcomes() -> dict[str, str]:
            ended = {orjson.loads(r.value or b"")["id"]: "vector" for r in h.results()}
            for letter in h.cluster.records(NAMES.dead_letters):
                reason = headers_dict(letter.headers)["embedstream.error.reason"]
                ended[(letter.key or b"").decode()] = reason
            return ended

        await eventually(lambda: len(outcomes()) == len(TEXTS))
        await h.all_inputs_finished()  # a second outcome for any id would be written by now
        assert len(h.results()) + len(h.cluster.records(NAMES.dead_letters)) == len(TEXTS)
        return {by_id[request_id]: how for request_id, how in outcomes().items()}


@pytest.mark.parametrize("behaviour", list(BEHAVIOURS))
async def test_the_processor_and_the_client_end_each_text_the_same_way(behaviour: str) -> None:
    script, expected = BEHAVIOURS[behaviour]
    client_backend, kafka_backend = ScriptedBackend(script), ScriptedBackend(script)
    assert await through_the_client(client_backend) == expected
    assert await through_kafka(kafka_backend) == expected
    if behaviour.startswith("429"):
        for backend in (client_backend, kafka_backend):  # held until retry-after, not sooner
            (first, _), (second, _) = backend.calls[:2]
            assert second - first >= 0.05 - 0.005
