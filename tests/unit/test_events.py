from __future__ import annotations

import orjson
import pytest
from embedstream.errors import InvalidEvent
from embedstream.wire import (
    EmbedRequest,
    EmbedResult,
    Failure,
    dead_letter_headers,
    decode_request,
    encode_request,
    headers_dict,
)


def test_minimal_request() -> None:
    assert decode_request(b'{"id":"a","text":"hello"}') == EmbedRequest(id="a", text="hello")


def test_full_request_round_trips() -> None:
    request = EmbedRequest(
        id="r-1",
        text="hi",
        model="m",
        encoding_format="base64",
        dimensions=64,
        metadata={"doc": 7},
        deadline_ms=1_700_000_000_000,
        user="user-7",
        input_type="query",
        task="retrieval.query",
    )
    assert decode_request(encode_request(request)) == request


def test_rfc3339_deadline() -> None:
    raw = b'{"id":"a","text":"t","deadline":"2026-01-01T00:00:00Z"}'
    assert decode_request(raw).deadline_ms == 1_767_225_600_000


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "empty_value"),
        (b"\xff\xfe{}", "invalid_utf8"),
        (b"{not json", "invalid_json"),
        (b"[1,2]", "not_an_object"),
        (b'{"text":"x"}', "missing_id"),
        (b'{"id":7,"text":"x"}', "invalid_id"),
        (b'{"id":"","text":"x"}', "invalid_id"),
        (b'{"id":"a"}', "missing_text"),
        (b'{"id":"a","text":5}', "invalid_text"),
        (b'{"id":"a","text":"   "}', "empty_text"),
        (b'{"id":"a","text":"x","model":3}', "invalid_model"),
        (b'{"id":"a","text":"x","encoding_format":"int8"}', "invalid_encoding_format"),
        (b'{"id":"a","text":"x","dimensions":0}', "invalid_dimensions"),
        (b'{"id":"a","text":"x","dimensions":true}', "invalid_dimensions"),
        (b'{"id":"a","text":"x","metadata":[]}', "invalid_metadata"),
        (b'{"id":"a","text":"x","deadline":"tomorrow"}', "invalid_deadline"),
        (b'{"id":"a","text":"x","deadline":"2026-01-01T00:00:00"}', "invalid_deadline"),
    ],
)
def test_malformed_input_is_rejected_with_a_reason(raw: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        decode_request(raw)
    assert info.value.reason == reason
    assert info.value.message


@pytest.mark.parametrize(
    ("raw", "byte"),
    [
        (b'{"id":"a","text":"\xff"}', 18),  # inside a string
        (b'{"id":"a","text":"x"}\xff', 21),  # after a whole object: UTF-8 is checked first
        (b'{"id":"a","text":"\xed\xa0\x80"}', 18),  # a surrogate, as UTF-8 never has it
        (b'{"id":"a","text":"x"} \xe2\x80', 22),  # cut short
    ],
)
def test_invalid_utf8_anywhere_is_named_so_with_its_byte(raw: bytes, byte: int) -> None:
    with pytest.raises(InvalidEvent) as info:
        decode_request(raw)
    assert info.value.reason == "invalid_utf8"
    assert info.value.message.endswith(f"at byte {byte}")


def test_valid_utf8_that_is_not_json_is_invalid_json() -> None:
    with pytest.raises(InvalidEvent) as info:
        decode_request('{"id":"a","text":"é"'.encode())
    assert info.value.reason == "invalid_json"


@pytest.mark.parametrize("text", ["", " ", "\t\n", "\u3000\u2003", "\x1c\x1d\x1e\x1f"])
def test_a_text_of_whitespace_only_is_empty_text(text: str) -> None:
    assert not text.strip()  # what the rule says: nothing left once stripped
    with pytest.raises(InvalidEvent) as info:
        decode_request(orjson.dumps({"id": "a", "text": text}))
    assert info.value.reason == "empty_text"


def test_a_text_with_anything_but_whitespace_is_a_request() -> None:
    assert decode_request(orjson.dumps({"id": "a", "text": "\u3000x\t"})).text == "\u3000x\t"


def test_oversized_value() -> None:
    raw = orjson.dumps({"id": "a", "text": "x" * 100})
    with pytest.raises(InvalidEvent) as info:
        decode_request(raw, max_bytes=50)
    assert info.value.reason == "oversized"


@pytest.mark.parametrize(
    ("latency_ms", "written"),
    [(41.0, 41.0), (12.3456, 12.346), (0.0004, 0.0), (41, 41), (1e300, 1e300)],
)
def test_a_results_latency_is_written_to_the_microsecond(latency_ms: float, written: float) -> None:
    result = EmbedResult("a", "m", "AAAAPw==", 1, 3, None, 1, latency_ms)
    value = orjson.loads(result.encode())["latency_ms"]
    assert value == written and type(value) is type(written)


def test_result_encoding() -> None:
    result = EmbedResult("a", "m", [0.5, -0.5], 2, 3, {"k": 1}, 1, 12.3456)
    assert orjson.loads(result.encode()) == {
        "id": "a",
        "model": "m",
        "embedding": [0.5, -0.5],
        "dimensions": 2,
        "usage": {"tokens": 3},
        "metadata": {"k": 1},
        "attempts": 1,
        "latency_ms": 12.346,
        "cached": False,
    }
    served = EmbedResult("a", "m", [0.5], 1, 0, None, 0, 1.0, cached=True)
    assert orjson.loads(served.encode())["cached"] is True


def test_dead_letter_headers_truncate_the_message() -> None:
    failure = Failure("PermanentItemError", "too_long", "é" * 2000, 2, "t", 3, 42, 1, 2)
    headers = headers_dict(dead_letter_headers(failure))
    assert headers["embedstream.error.reason"] == "too_long"
    assert headers["embedstream.source.offset"] == "42"
    assert len(headers["embedstream.error.message"].encode()) <= 1024
