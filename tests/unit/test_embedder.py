"""The OpenAI client wrapper against the simulator: index matching and error classes."""

from __future__ import annotations

import asyncio
import math

import orjson
import pytest
from embedsim.model import (
    SimulatorConfig,
    decode_base64,
    encode_base64,
    expected_vector,
)
from embedsim.server import SimulatorServer
from embedstream.engine.answers import _outcome, parse_body
from embedstream.engine.backend import BatchCall
from embedstream.engine.client import BatchingClient
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.errors import PermanentItemError, ProviderWideError, TransientError
from embedstream.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

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


def _response(entries: list[tuple[object, object]], tokens: int = 3) -> dict[str, object]:
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in entries]
    return {"object": "list", "data": data, "usage": {"total_tokens": tokens}}


B64_2 = encode_base64([1.0, 0.0])  # two float32


@pytest.mark.parametrize(
    ("entries", "dimensions", "why"),
    [
        ([(0, [1.0, 0.0])], None, "count"),  # two inputs, one vector
        ([(0, [1.0, 0.0]), (0, [0.0, 1.0])], None, "repeated index"),
        ([(0, [1.0, 0.0]), (5, [0.0, 1.0])], None, "index out of range"),
        ([(0, [1.0, 0.0]), ("1", [0.0, 1.0])], None, "index not an int"),
        ([(0, [1.0, 0.0]), (True, [0.0, 1.0])], None, "index a bool"),
        ([(0, [1.0, 0.0]), (1, [math.nan, 1.0])], None, "NaN"),
        ([(0, [1.0, 0.0]), (1, [math.inf, 1.0])], None, "infinity"),
        ([(0, [1.0, 0.0]), (1, [0.0, 1.0, 0.0])], 2, "wrong dimensions"),
        ([(0, [1.0, 0.0]), (1, [0.0, 1.0, 0.0])], None, "vectors of different lengths"),
        ([(0, [1.0, 0.0]), (1, [])], None, "empty vector"),
        ([(0, [1.0, 0.0]), (1, None)], None, "no embedding"),
        ([(0, [1.0, 0.0]), (1, {"x": 1})], None, "embedding not a list"),
        ([(0, [1.0, 0.0]), (1, [0.0, "1"])], None, "a string among the floats"),
        ([(0, [1.0, 0.0]), (1, [0.0, 10**400])], None, "an int past float range"),
        ([(0, B64_2), (1, encode_base64([0.0, math.nan]))], None, "NaN in base64"),
        ([(0, B64_2), (1, encode_base64([1.0, 0.0, 0.0]))], 2, "base64 wrong dimensions"),
        ([(0, B64_2), (1, B64_2[:-4])], None, "base64 cut short"),
        ([(0, B64_2), (1, "AAA=")], None, "base64 not whole float32"),
        ([(0, B64_2), (1, "AA!AAAAAAAA=")], None, "base64 with a bad character"),
        ([(0, B64_2), (1, "")], None, "empty base64"),
    ],
)
def test_malformed_responses_are_transient_and_splittable(
    entries: list[tuple[object, object]], dimensions: int | None, why: str
) -> None:
    call = BatchCall("m", ["a", "b"], "float", dimensions)
    with pytest.raises(TransientError) as info:
        _outcome(call, _response(entries), 0.01, {})
    assert info.value.reason == "malformed_response", why


@pytest.mark.parametrize(
    ("entries", "dimensions", "why"),
    [
        ([(0, B64_2), (0, B64_2)], None, "repeated index"),
        ([(0, B64_2), (True, B64_2)], None, "index a bool"),
        ([(0, B64_2), (1, encode_base64([1.0, 0.0, 0.0]))], None, "vectors of different lengths"),
        ([(0, B64_2), (1, encode_base64([1.0, 0.0, 0.0]))], 2, "wrong dimensions"),
        ([(0, B64_2), (1, B64_2[:-4])], None, "cut short"),
        ([(0, "AAAAAA=="), (1, "AAAAAAA=")], None, "the same length, a size no float32 has"),
        ([(0, B64_2), (1, "AAA=")], None, "not whole float32"),
        ([(0, B64_2), (1, "")], None, "empty"),
        ([(0, B64_2), (1, None)], None, "no embedding"),
    ],
)
def test_malformed_base64_answers_to_a_base64_request_are_transient(
    entries: list[tuple[object, object]], dimensions: int | None, why: str
) -> None:
    """The base64 a request asked for is passed through untouched, its length checked."""
    call = BatchCall("m", ["a", "b"], "base64", dimensions)
    with pytest.raises(TransientError) as info:
        _outcome(call, _response(entries), 0.01, {})
    assert info.value.reason == "malformed_response", why


def test_base64_vectors_of_one_size_are_passed_through() -> None:
    entries: list[tuple[object, object]] = [(i, encode_base64([float(i), 1.0])) for i in range(5)]
    outcome = _outcome(BatchCall("m", list("abcde"), "base64", None), _response(entries), 0.0, {})
    assert outcome.vectors == [vector for _, vector in entries]
    assert outcome.dimensions == 2


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ({"data": "nope"}, "data not a list"),
        ({"object": "list"}, "no data"),
        ([], "not an object"),
        ({"data": [1, 2]}, "entries not objects"),
    ],
)
def test_malformed_documents_are_transient(document: object, why: str) -> None:
    with pytest.raises(TransientError) as info:
        _outcome(BatchCall("m", ["a", "b"], "float", None), document, 0.01, {})
    assert info.value.reason == "malformed_response", why


@pytest.mark.parametrize("body", [b"", b"{", b"<html>502 Bad Gateway</html>", b'{"data": [NaN]}'])
def test_an_unreadable_body_is_transient(body: bytes) -> None:
    with pytest.raises(TransientError) as info:
        parse_body(BatchCall("m", ["a"], "float", None), body, 0.01, {})
    assert info.value.reason == "malformed_response"


def test_a_well_formed_response_in_any_order() -> None:
    call = BatchCall("m", ["a", "b"], "float", 2)
    outcome = _outcome(call, _response([(1, [0.0, 1.0]), (0, [1.0, 0.0])]), 0.01, {})
    assert outcome.vectors == [[1.0, 0.0], [0.0, 1.0]]
    assert (outcome.dimensions, outcome.total_tokens) == (2, 3)


def test_base64_on_the_wire_is_decoded_for_a_float_request() -> None:
    vectors = [[0.25, -1.5, 3.0], [1e-3, 2.0, -0.0]]
    entries: list[tuple[object, object]] = [(i, encode_base64(v)) for i, v in enumerate(vectors)]
    body = orjson.dumps(_response(entries, tokens=7))
    outcome = parse_body(BatchCall("m", ["a", "b"], "float", None), body, 0.01, {"x": "y"})
    assert outcome.vectors == [decode_base64(encode_base64(v)) for v in vectors]  # float32
    assert (outcome.dimensions, outcome.total_tokens, outcome.headers) == (3, 7, {"x": "y"})


def test_a_base64_request_gets_base64_even_from_a_provider_sending_floats() -> None:
    call = BatchCall("m", ["a", "b"], "base64", None)
    outcome = _outcome(call, _response([(0, B64_2), (1, [0.5, 0.25])]), 0.01, {})
    assert outcome.vectors[0] is B64_2  # passed through untouched
    assert decode_base64(str(outcome.vectors[1])) == [0.5, 0.25]
    assert outcome.dimensions == 2


@given(
    st.lists(
        st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1),
        min_size=1,
        max_size=4,
    ).filter(lambda vs: len({len(v) for v in vs}) == 1)
)
def test_base64_decoding_round_trips(vectors: list[list[float]]) -> None:
    entries: list[tuple[object, object]] = [(i, encode_base64(v)) for i, v in enumerate(vectors)]
    call = BatchCall("m", [str(i) for i in range(len(vectors))], "float", None)
    outcome = parse_body(call, orjson.dumps(_response(entries)), 0.0, {})
    assert outcome.vectors == vectors
    assert outcome.dimensions == len(vectors[0])


def test_a_float_request_takes_base64_and_float_entries_in_one_answer() -> None:
    call = BatchCall("m", ["a", "b", "c"], "float", None)
    entries: list[tuple[object, object]] = [
        (2, encode_base64([0.5, 1.0])), (0, [0.25, 0.75]), (1, encode_base64([-2.0, 3.0])),
    ]  # fmt: skip
    outcome = _outcome(call, _response(entries), 0.01, {})
    assert outcome.vectors == [[0.25, 0.75], [-2.0, 3.0], [0.5, 1.0]]
    assert all(isinstance(v, list) and len(v) == 2 for v in outcome.vectors)


def test_usage_that_is_not_a_count_reads_as_zero() -> None:
    document = _response([(0, [1.0])]) | {"usage": {"total_tokens": "many"}}
    outcome = _outcome(BatchCall("m", ["a"], "float", None), document, 0.01, {})
    assert outcome.total_tokens == 0


# --------------------------------------------------------------------------- presets and gateways


async def test_extra_headers_and_body_and_the_call_fields_reach_the_provider() -> None:
    async with SimulatorServer(SimulatorConfig(base_ms=0, record_calls=True,
                                               flavor="vllm")) as sim:  # fmt: skip
        settings = load_settings(env={}, overrides={
            "base_url": sim.url, "provider_profile": "vllm",
            "extra_headers": '{"X-Route": "eu-west"}',
            "extra_body": '{"truncate_prompt_tokens": 256, "user": "default-user"}',
        })  # fmt: skip
        embedder = OpenAIEmbedder.from_settings(settings)
        try:
            await embedder.embed(BatchCall("m", ["a"], "float", None, user="user-7"))
            await embedder.embed(BatchCall("m", ["b"], "float", None))
        finally:
            await embedder.close()
    first, second = sim.calls
    assert first.headers["x-route"] == "eu-west"
    # The call's own fields win over extra_body's defaults.
    assert first.fields == {"model": "m", "encoding_format": "base64",
                            "truncate_prompt_tokens": 256, "user": "user-7"}  # fmt: skip
    assert second.fields["user"] == "default-user"


async def test_a_provider_without_base64_is_asked_for_floats() -> None:
    async with SimulatorServer(SimulatorConfig(base_ms=0, record_calls=True)) as sim:
        settings = load_settings(
            env={}, overrides={"base_url": sim.url, "provider_profile": "dashscope"}
        )
        embedder = OpenAIEmbedder.from_settings(settings)
        try:
            outcome = await embedder.embed(BatchCall("m", ["a"], "float", None))
        finally:
            await embedder.close()
    assert sim.calls[0].fields["encoding_format"] == "float"
    assert outcome.vectors == [expected_vector("m", "a", 256)]


async def test_a_secret_gateway_header_echoed_back_is_scrubbed() -> None:
    async with SimulatorServer(SimulatorConfig(base_ms=0, auth_key="other")) as sim:
        embedder = OpenAIEmbedder(
            base_url=sim.url,
            api_key=None,
            timeout_s=5,
            extra_headers={"Authorization": "Bearer canary-gateway-key"},
        )
        try:
            with pytest.raises(ProviderWideError) as info:
                await embedder.embed(BatchCall("m", ["a"], "float", None))
        finally:
            await embedder.close()
    assert "Incorrect API key provided: ***" in str(info.value)  # it was echoed, and masked
    assert "canary-gateway-key" not in str(info.value)


@pytest.mark.parametrize(
    ("config", "dimensions", "reason"),
    [
        # vLLM refuses `dimensions` for a model without Matryoshka training.
        (SimulatorConfig(base_ms=0, flavor="vllm", matryoshka=False), 64,
         "unsupported_dimensions"),
        (SimulatorConfig(base_ms=0, flavor="vllm", matryoshka=False), None, None),
        (SimulatorConfig(base_ms=0, reject_texts_containing="a"), 64, "rejected"),
    ],
)  # fmt: skip
async def test_a_refusal_of_dimensions_is_its_own_reason(
    config: SimulatorConfig, dimensions: int | None, reason: str | None
) -> None:
    async with SimulatorServer(config) as sim:
        embedder = OpenAIEmbedder(base_url=sim.url, api_key="k", timeout_s=5)
        try:
            if reason is None:
                await embedder.embed(BatchCall("m", ["a"], "float", dimensions))
                return
            with pytest.raises(PermanentItemError) as info:
                await embedder.embed(BatchCall("m", ["a"], "float", dimensions))
        finally:
            await embedder.close()
    assert info.value.reason == reason


async def test_a_refusal_of_dimensions_fails_the_bucket_without_splitting_it() -> None:
    config = SimulatorConfig(base_ms=0, flavor="vllm", matryoshka=False)
    async with (
        SimulatorServer(config) as sim,
        BatchingClient(base_url=sim.url, provider_profile="vllm", max_wait_ms=50) as client,
    ):
        answers = await asyncio.gather(
            *(client.embed(f"text {i}", dimensions=64) for i in range(8)), return_exceptions=True
        )
    assert {getattr(a, "reason", None) for a in answers} == {"unsupported_dimensions"}
    assert sim.stats.calls < 8  # one refusal answered the batch: no halving down to singles
