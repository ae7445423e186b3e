"""Unit tests of the pure simulator model: vectors, tokens, validation, faults, stats."""

from __future__ import annotations

import base64
import hashlib
import math
import random
import struct
import time
from typing import Any

import orjson
import pytest
from embedsim.model import (
    ApiError,
    EmbeddingRequest,
    Limits,
    SimulatorConfig,
    Stats,
    TokenBucket,
    build_response,
    check_auth,
    check_rejected_texts,
    count_tokens,
    decide_faults,
    decode_base64,
    encode_base64,
    expected_vector,
    latency_s,
    parse_request,
    rate_limited,
    validate_request,
)
from hypothesis import given
from hypothesis import strategies as st

CONFIG = SimulatorConfig()


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# --------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("dimensions", [1, 2, 3, 64, 256, 1536, 3072])
def test_vector_has_requested_length_and_unit_norm(dimensions: int) -> None:
    vector = expected_vector("text-embedding-3-small", "hello world", dimensions)
    assert len(vector) == dimensions
    assert norm(vector) == pytest.approx(1.0, abs=1e-6)


@given(model=st.text(min_size=1), text=st.text(min_size=1), dimensions=st.integers(1, 512))
def test_vector_is_deterministic_unit_and_float32(model: str, text: str, dimensions: int) -> None:
    vector = expected_vector(model, text, dimensions)
    assert vector == expected_vector(model, text, dimensions)
    assert norm(vector) == pytest.approx(1.0, abs=1e-6)
    assert decode_base64(encode_base64(vector)) == vector  # already float32-exact


def test_vector_is_pinned_across_processes() -> None:
    # Literal values guard against depending on hash(), process state or silent changes
    # to the algorithm that other modules' tests rely on.
    assert expected_vector("text-embedding-3-small", "hello", 4) == [
        -0.36573079228401184,
        0.4508788287639618,
        -0.5133615732192993,
        0.6319882273674011,
    ]


def test_vector_algorithm_is_length_prefixed_shake256() -> None:
    vector = expected_vector("m", "hello", 4)
    seed = b"\x01\x00\x00\x00" + b"m" + b"hello"  # 4-byte little-endian model length prefix
    raw = struct.unpack("<4i", hashlib.shake_256(seed).digest(16))
    scale = 1.0 / math.hypot(*raw)
    assert vector == pytest.approx([x * scale for x in raw], abs=1e-7)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("m", "hello"), ("m", "hello!")),
        (("m", "hello"), ("m2", "hello")),
        (("m", "a\0b"), ("m\0a", "b")),
        (("m", "Hello"), ("m", "hello")),
    ],
)
def test_vector_differs_across_texts_and_models(a: tuple[str, str], b: tuple[str, str]) -> None:
    assert expected_vector(*a, 64) != expected_vector(*b, 64)


def test_smaller_dimensions_are_the_renormalised_prefix() -> None:
    full = expected_vector("m", "text", 256)
    short = expected_vector("m", "text", 32)
    prefix_norm = norm(full[:32])
    assert short == pytest.approx([x / prefix_norm for x in full[:32]], abs=1e-6)


def test_vector_rejects_non_positive_dimensions() -> None:
    with pytest.raises(ValueError):
        expected_vector("m", "text", 0)


def test_vector_handles_lone_surrogates() -> None:
    assert len(expected_vector("m", "\ud800", 8)) == 8


def test_vectors_are_fast_enough() -> None:
    # Generous bound: the machine is shared; typical runtime is a fraction of this.
    started = time.perf_counter()
    for i in range(5000):
        expected_vector("m", f"text number {i}", 256)
    assert time.perf_counter() - started < 10.0


def test_base64_is_little_endian_float32() -> None:
    vector = [1.0, -2.5, 0.1]
    raw = base64.b64decode(encode_base64(vector))
    assert raw == struct.pack("<3f", *vector)
    assert raw[:4] == b"\x00\x00\x80\x3f"  # 1.0f little-endian
    assert decode_base64(encode_base64(vector)) == pytest.approx(vector, rel=1e-7)


def test_decode_base64_rejects_partial_floats() -> None:
    with pytest.raises(ValueError):
        decode_base64(base64.b64encode(b"abc").decode())


# --------------------------------------------------------------------------- tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        (" ", 1),
        ("\n\t", 1),
        ("hello", 1),
        ("hello world", 2),
        ("hello, world!", 4),
        ("a-b", 3),
        ("naïve café", 2),
        ("x" * 1000, 1),
        ("a " * 8193, 8193),
        ("日本語 テキスト", 2),
    ],
)
def test_count_tokens(text: str, tokens: int) -> None:
    assert count_tokens(text) == tokens


@given(st.text(min_size=1))
def test_count_tokens_is_positive_for_non_empty_text(text: str) -> None:
    assert count_tokens(text) >= 1


# --------------------------------------------------------------------------- validation


def validate(body: dict[str, Any], config: SimulatorConfig = CONFIG) -> EmbeddingRequest:
    return validate_request(body, config)


def test_valid_request_defaults() -> None:
    request = validate({"model": "m", "input": "hello world"})
    assert request == EmbeddingRequest(
        model="m",
        inputs=("hello world",),
        token_counts=(2,),
        encoding_format="float",
        dimensions=256,
    )
    assert request.total_tokens == 2


def test_valid_request_with_all_parameters() -> None:
    body = {
        "model": "m",
        "input": ["a", "b c"],
        "encoding_format": "base64",
        "dimensions": 3072,
        "user": "u",
    }
    request = validate(body)
    assert request.inputs == ("a", "b c")
    assert request.token_counts == (1, 2)
    assert request.encoding_format == "base64"
    assert request.dimensions == 3072
    assert request.user == "u"


def test_default_dimensions_are_configurable() -> None:
    config = SimulatorConfig(default_dimensions=8)
    assert validate({"model": "m", "input": "x"}, config).dimensions == 8


def test_limits_at_the_boundary_pass() -> None:
    assert len(validate({"model": "m", "input": ["x"] * 2048}).inputs) == 2048
    assert validate({"model": "m", "input": "a " * 8192}).total_tokens == 8192
    # 36 inputs * 8192 + 5088 = 300,000 tokens exactly.
    texts = ["a " * 8192] * 36 + ["a " * 5088]
    assert validate({"model": "m", "input": texts}).total_tokens == 300_000


MAX_TOKENS_INPUT = "a " * 8193
TOO_MANY_TOKENS_IN_TOTAL = ["a " * 8192] * 37  # 303,104 tokens

INVALID_REQUESTS: list[tuple[str, Any, str | None, str]] = [
    # (case, body, expected param, text the message must contain)
    ("too many inputs", {"model": "m", "input": ["x"] * 2049}, "input", "2048"),
    ("empty string", {"model": "m", "input": ""}, "input[0]", "input[0]"),
    ("empty string in list", {"model": "m", "input": ["a", "b", "", "d"]}, "input[2]", "input[2]"),
    ("input too long", {"model": "m", "input": ["a", MAX_TOKENS_INPUT]}, "input[1]", "input[1]"),
    ("request too long", {"model": "m", "input": TOO_MANY_TOKENS_IN_TOTAL}, "input", "300000"),
    ("int in list", {"model": "m", "input": ["a", "b", "c", 7]}, "input[3]", "input[3]"),
    ("null in list", {"model": "m", "input": ["a", None]}, "input[1]", "input[1]"),
    ("negative token id", {"model": "m", "input": [[1, -2, 3]]}, "input[0]", "input[0]"),
    ("empty token array", {"model": "m", "input": ["a", []]}, "input[1]", "input[1]"),
    ("input not a list", {"model": "m", "input": {"a": 1}}, "input", "input"),
    ("input is a number", {"model": "m", "input": 3}, "input", "input"),
    ("empty list", {"model": "m", "input": []}, "input", "empty"),
    ("missing input", {"model": "m"}, "input", "input"),
    ("missing model", {"input": "x"}, "model", "model"),
    ("model not a string", {"model": 3, "input": "x"}, "model", "model"),
    ("empty model", {"model": "", "input": "x"}, "model", "model"),
    ("bad encoding", {"model": "m", "input": "x", "encoding_format": "hex"}, "encoding_format", ""),
    ("zero dimensions", {"model": "m", "input": "x", "dimensions": 0}, "dimensions", "3072"),
    ("huge dimensions", {"model": "m", "input": "x", "dimensions": 3073}, "dimensions", "3072"),
    ("float dimensions", {"model": "m", "input": "x", "dimensions": 2.0}, "dimensions", ""),
    ("bool dimensions", {"model": "m", "input": "x", "dimensions": True}, "dimensions", ""),
    ("user not a string", {"model": "m", "input": "x", "user": 1}, "user", "user"),
    ("unknown parameter", {"model": "m", "input": "x", "temperature": 1}, "temperature", ""),
]


@pytest.mark.parametrize(
    ("body", "param", "message_part"),
    [case[1:] for case in INVALID_REQUESTS],
    ids=[case[0] for case in INVALID_REQUESTS],
)
def test_invalid_requests_are_rejected_with_openai_errors(
    body: dict[str, Any], param: str | None, message_part: str
) -> None:
    with pytest.raises(ApiError) as caught:
        validate(body)
    error = caught.value
    assert error.status == 400
    assert error.param == param
    assert message_part in error.message
    assert error.body() == {
        "error": {
            "message": error.message,
            "type": "invalid_request_error",
            "param": param,
            "code": error.code,
        }
    }


def test_token_id_inputs_are_taken_where_openai_takes_them() -> None:
    one = validate({"model": "m", "input": [5, 6, 7]})  # one input of ids
    many = validate({"model": "m", "input": [[5, 6, 7], [8]]})
    assert one.inputs == many.inputs[:1] and one.token_counts == (3,)
    assert many.token_counts == (3, 1)
    text = validate({"model": "m", "input": "5,6,7"})
    assert text.inputs != one.inputs  # ids never embed like a text
    tei = CONFIG.replace(flavor="tei")
    with pytest.raises(ApiError) as caught:
        validate({"model": "m", "input": [[5, 6, 7]]}, tei)
    assert caught.value.param == "input[0]"


def test_custom_limits_apply() -> None:
    config = SimulatorConfig(limits=Limits(max_inputs=2, max_tokens_per_input=3))
    with pytest.raises(ApiError, match="at most 2 items"):
        validate({"model": "m", "input": ["a", "b", "c"]}, config)
    with pytest.raises(ApiError, match=r"input\[1\]"):
        validate({"model": "m", "input": ["a", "a b c d"]}, config)


def test_openai_limits() -> None:
    assert Limits.openai() == Limits(2048, 8192, 300_000)


@pytest.mark.parametrize(
    ("raw", "message_part"),
    [(b"{not json", "parse"), (b"[1, 2]", "JSON object"), (b"", "parse")],
)
def test_parse_request_rejects_non_object_bodies(raw: bytes, message_part: str) -> None:
    with pytest.raises(ApiError, match=message_part) as caught:
        parse_request(raw, CONFIG)
    assert caught.value.status == 400


def test_parse_request_accepts_json_bytes() -> None:
    raw = orjson.dumps({"model": "m", "input": ["x", "y"]})
    assert parse_request(raw, CONFIG).inputs == ("x", "y")


@pytest.mark.parametrize(
    ("inputs", "index"),
    [(["POISON"], 0), (["a", "b", "c has POISON", "d POISON"], 2), (["a", "b"], None)],
)
def test_rejected_texts_name_the_first_matching_index(inputs: list[str], index: int | None) -> None:
    config = SimulatorConfig(reject_texts_containing="POISON")
    request = validate({"model": "m", "input": inputs}, config)
    if index is None:
        check_rejected_texts(config, request)
        return
    with pytest.raises(ApiError) as caught:
        check_rejected_texts(config, request)
    assert caught.value.status == 400
    assert caught.value.param == f"input[{index}]"
    assert f"input[{index}]" in caught.value.message


@pytest.mark.parametrize(
    ("key", "header", "ok"),
    [
        (None, None, True),
        (None, "Bearer anything", True),
        ("secret", "Bearer secret", True),
        ("secret", "Bearer wrong", False),
        ("secret", "secret", False),
        ("secret", None, False),
    ],
)
def test_auth(key: str | None, header: str | None, ok: bool) -> None:
    config = SimulatorConfig(auth_key=key)
    if ok:
        check_auth(config, header)
        return
    with pytest.raises(ApiError) as caught:
        check_auth(config, header)
    assert caught.value.status == 401
    assert caught.value.code == "invalid_api_key"


# --------------------------------------------------------------------------- responses


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_build_response_shape(encoding: str) -> None:
    body = {"model": "m", "input": ["a b", "c"], "encoding_format": encoding, "dimensions": 8}
    response = build_response(validate(body), order=[1, 0])
    assert response["object"] == "list"
    assert response["model"] == "m"
    assert response["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    data = response["data"]
    assert isinstance(data, list)
    assert [item["index"] for item in data] == [1, 0]
    for item in data:
        assert item["object"] == "embedding"
        embedding = item["embedding"]
        vector = decode_base64(embedding) if encoding == "base64" else embedding
        assert vector == expected_vector("m", ["a b", "c"][item["index"]], 8)


def test_latency_model() -> None:
    config = SimulatorConfig(base_ms=5, per_token_ms=0.5, per_input_ms=2)
    request = validate({"model": "m", "input": ["a b", "c"]})  # 3 tokens, 2 inputs
    assert latency_s(config, request) == pytest.approx((5 + 1.5 + 4) / 1000)


# --------------------------------------------------------------------------- faults


def test_no_faults_by_default_and_no_dice_rolled() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    decision = decide_faults(CONFIG, 5, rng)
    assert (decision.fail, decision.hang, decision.order) == (False, False, (0, 1, 2, 3, 4))
    assert rng.getstate() == state


@pytest.mark.parametrize(
    ("changes", "fail", "hang"),
    [
        ({"error_rate": 1.0}, True, False),
        ({"hang_rate": 1.0}, False, True),
        ({"error_rate": 1.0, "hang_rate": 1.0}, True, False),
    ],
)
def test_certain_faults(changes: dict[str, Any], fail: bool, hang: bool) -> None:
    decision = decide_faults(CONFIG.replace(**changes), 3, random.Random(0))
    assert (decision.fail, decision.hang) == (fail, hang)


@pytest.mark.parametrize("n", [2, 3, 10, 100])
def test_shuffle_always_permutes_visibly(n: int) -> None:
    config = CONFIG.replace(shuffle_rate=1.0)
    rng = random.Random(3)
    for _ in range(50):
        order = decide_faults(config, n, rng).order
        assert sorted(order) == list(range(n))
        assert list(order) != list(range(n))


def test_fault_rates_are_roughly_respected_and_seeded() -> None:
    config = CONFIG.replace(error_rate=0.3)
    fails = [decide_faults(config, 1, random.Random(42)).fail for _ in range(3)]
    assert len(set(fails)) == 1  # same seed, same decision
    rng = random.Random(7)
    count = sum(decide_faults(config, 1, rng).fail for _ in range(10_000))
    assert 2500 < count < 3500


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=2.0, burst=2.0, now=100.0)
    assert bucket.take(100.0) == 0.0
    assert bucket.take(100.0) == 0.0
    assert bucket.take(100.0) == pytest.approx(0.5)
    assert bucket.take(100.25) == pytest.approx(0.25)
    assert bucket.take(100.5) == 0.0
    assert bucket.take(110.0) == 0.0  # refilled, but only up to the burst
    assert bucket.take(110.0) == 0.0
    assert bucket.take(110.0) > 0.0


def test_rate_limited_error_carries_retry_headers() -> None:
    error = rate_limited(1.2345)
    assert error.status == 429
    assert error.headers == {"retry-after": "1.234", "retry-after-ms": "1235"}
    assert error.body()["error"] == {
        "message": error.message,
        "type": "rate_limit_exceeded",
        "param": None,
        "code": "rate_limit_exceeded",
    }


# --------------------------------------------------------------------------- config


def test_config_replace_coerces_json_values() -> None:
    config = CONFIG.replace(error_rate=1, auth_key="k", seed=3, limits={"max_inputs": 5})
    assert config.error_rate == 1.0 and isinstance(config.error_rate, float)
    assert config.auth_key == "k"
    assert config.limits == Limits(max_inputs=5)
    assert CONFIG.error_rate == 0.0  # frozen original untouched


@pytest.mark.parametrize(
    "changes",
    [
        {"nope": 1},
        {"error_rate": 1.5},
        {"error_rate": -0.1},
        {"error_rate": "0.5"},
        {"error_rate": True},
        {"capacity": 0},
        {"capacity": 2.5},
        {"base_ms": float("nan")},
        {"auth_key": 5},
        {"reject_texts_containing": ""},
        {"default_dimensions": 4000},
        {"limits": {"max_inputs": 0}},
        {"limits": {"bogus": 1}},
        {"limits": 3},
    ],
)
def test_config_replace_rejects_bad_values(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CONFIG.replace(**changes)


def test_config_to_json_round_trips() -> None:
    config = SimulatorConfig(error_rate=0.5, limits=Limits(max_inputs=9))
    assert CONFIG.replace(**orjson.loads(orjson.dumps(config.to_json()))) == config


# --------------------------------------------------------------------------- stats


def test_stats_counting_and_reset() -> None:
    stats = Stats()
    stats.calls += 3
    stats.enter()
    stats.enter()
    stats.leave()
    stats.record_error(429)
    stats.record_error(429)
    stats.record_error(500)
    stats.record_served(validate({"model": "m", "input": ["a b", "c"]}))
    stats.batches += 1
    stats.served_batch(5, 40)
    for at in (10.0, 10.5, 11.0):  # three calls received at once by a provider of two slots
        stats.arrive(at, capacity=2)
    stats.depart(11.25, capacity=2)  # over the capacity from 11.0 to 11.25
    stats.arrive(12.0, capacity=2)
    stats.depart(12.75, capacity=2)  # and from 12.0 to 12.75
    assert stats.to_json() == {
        "calls": 3,
        "inputs": 2,
        "tokens": 3,
        "errors": {"429": 2, "500": 1},
        "peak_concurrency": 2,
        "in_flight": 1,
        "rejected_429": 2,
        "batches": 1,
        "batch_inputs": 5,
        "batch_tokens": 40,
        "received": 2,
        "peak_received": 3,
        "over_capacity_s": 1.0,
        "longest_over_capacity_s": 0.75,
    }
    stats.reset()
    assert stats.to_json() == {
        "calls": 0,
        "inputs": 0,
        "tokens": 0,
        "errors": {},
        "peak_concurrency": 1,
        "in_flight": 1,
        "rejected_429": 0,
        "batches": 0,
        "batch_inputs": 0,
        "batch_tokens": 0,
        "received": 2,
        "peak_received": 2,
        "over_capacity_s": 0.0,
        "longest_over_capacity_s": 0.0,
    }
