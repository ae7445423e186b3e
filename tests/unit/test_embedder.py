"""The OpenAI client wrapper against the simulator: index matching and error classes."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from embedstream.engine.embedder import BatchCall, OpenAIEmbedder, _outcome
from embedstream.errors import PermanentItemError, ProviderWideError, TransientError
from embedstream.tools.simulator.model import SimulatorConfig, decode_base64, expected_vector
from embedstream.tools.simulator.server import SimulatorServer

TEXTS = [f"text {i}" for i in range(12)]


async def test_vectors_are_matched_by_index_not_position() -> None:
    async with SimulatorServer(SimulatorConfig(base_ms=0, shuffle_rate=1.0)) as sim:
        embedder = OpenAIEmbedder(base_url=sim.url, api_key="k", timeout_s=5)
        try:
            outcome = await embedder.embed(BatchCall("m", TEXTS, "float", 32))
        finally:
            await embedder.close()
    assert outcome.vectors == [expected_vector("m", t, 32) for t in TEXTS]
    assert outcome.dimensions == 32


async def test_base64_is_passed_through_untouched() -> None:
    async with SimulatorServer(SimulatorConfig(base_ms=0)) as sim:
        embedder = OpenAIEmbedder(base_url=sim.url, api_key="k", timeout_s=5)
        try:
            outcome = await embedder.embed(BatchCall("m", TEXTS[:2], "base64", None))
        finally:
            await embedder.close()
    assert all(isinstance(v, str) for v in outcome.vectors)
    assert decode_base64(str(outcome.vectors[1])) == expected_vector("m", TEXTS[1], 256)
    assert outcome.dimensions == 256


@pytest.mark.parametrize(
    ("config", "error", "reason"),
    [
        (SimulatorConfig(base_ms=0, auth_key="other"), ProviderWideError, "auth"),
        (SimulatorConfig(base_ms=0, error_rate=1.0), TransientError, "http_500"),
        (SimulatorConfig(base_ms=0, rate_limit_for_s=60), TransientError, "rate_limited"),
        (SimulatorConfig(base_ms=0, reject_texts_containing="3"), PermanentItemError, "rejected"),
        (SimulatorConfig(base_ms=0, hang_rate=1.0, hang_s=60), TransientError, "timeout"),
    ],
)
async def test_errors_are_classified(
    config: SimulatorConfig, error: type[Exception], reason: str
) -> None:
    async with SimulatorServer(config) as sim:
        embedder = OpenAIEmbedder(base_url=sim.url, api_key="sk-secret-key", timeout_s=0.5)
        try:
            with pytest.raises(error) as info:
                await embedder.embed(BatchCall("m", TEXTS, "float", None))
        finally:
            await embedder.close()
    assert getattr(info.value, "reason", None) == reason
    assert "sk-secret-key" not in str(info.value)
    if reason == "rate_limited":
        assert getattr(info.value, "retry_after", None) is not None


async def test_unreachable_provider_is_a_connection_error() -> None:
    embedder = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", api_key="k", timeout_s=2)
    try:
        with pytest.raises(TransientError) as info:
            await embedder.embed(BatchCall("m", ["x"], "float", None))
    finally:
        await embedder.close()
    assert info.value.reason == "connection"


def _response(entries: list[tuple[object, object]], tokens: int = 3) -> SimpleNamespace:
    data = [SimpleNamespace(index=i, embedding=e) for i, e in entries]
    return SimpleNamespace(data=data, usage=SimpleNamespace(total_tokens=tokens))


@pytest.mark.parametrize(
    ("entries", "dimensions", "why"),
    [
        ([(0, [1.0, 0.0])], None, "count"),  # two inputs, one vector
        ([(0, [1.0, 0.0]), (0, [0.0, 1.0])], None, "repeated index"),
        ([(0, [1.0, 0.0]), (5, [0.0, 1.0])], None, "index out of range"),
        ([(0, [1.0, 0.0]), (1, [math.nan, 1.0])], None, "NaN"),
        ([(0, [1.0, 0.0]), (1, [0.0, 1.0, 0.0])], 2, "wrong dimensions"),
        ([(0, [1.0, 0.0]), (1, [])], None, "empty vector"),
    ],
)
def test_malformed_responses_are_transient_and_splittable(
    entries: list[tuple[object, object]], dimensions: int | None, why: str
) -> None:
    call = BatchCall("m", ["a", "b"], "float", dimensions)
    with pytest.raises(TransientError) as info:
        _outcome(call, _response(entries), 0.01, {})
    assert info.value.reason == "malformed_response", why


def test_a_well_formed_response_in_any_order() -> None:
    call = BatchCall("m", ["a", "b"], "float", 2)
    outcome = _outcome(call, _response([(1, [0.0, 1.0]), (0, [1.0, 0.0])]), 0.01, {})
    assert outcome.vectors == [[1.0, 0.0], [0.0, 1.0]]
    assert (outcome.dimensions, outcome.total_tokens) == (2, 3)
