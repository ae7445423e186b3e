"""OpenAI's embeddings request, answers and errors as the online lane speaks them (tables)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from embedstream.wire.openai import (
    ApiProblem,
    EmbeddingsRequest,
    embeddings_response,
    error_body,
    models_response,
    parse_embeddings_request,
)


def parse(body: object, **kwargs: Any) -> EmbeddingsRequest:
    return parse_embeddings_request(orjson.dumps(body), **kwargs)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"input": "a"}, EmbeddingsRequest(("a",))),
        ({"input": ["a", "b"]}, EmbeddingsRequest(("a", "b"))),
        ({"input": [1, 2, 3]}, EmbeddingsRequest(((1, 2, 3),))),  # one input of token ids
        ({"input": [[1, 2], [3]]}, EmbeddingsRequest(((1, 2), (3,)))),
        ({"input": ["a", [7]]}, EmbeddingsRequest(("a", (7,)))),
        (
            {"input": "a", "model": "m", "encoding_format": "base64", "dimensions": 8, "user": "u"},
            EmbeddingsRequest(("a",), "m", "base64", 8, "u"),
        ),
        ({"input": "a", "encoding_format": "float"}, EmbeddingsRequest(("a",), None, "float")),
        ({"input": "a", "model": None, "user": None}, EmbeddingsRequest(("a",))),
    ],
)
def test_valid_requests(body: dict[str, Any], expected: EmbeddingsRequest) -> None:
    assert parse(body) == expected


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "input", "missing_required"),
        ({"input": 3}, "input", "invalid_type"),
        ({"input": {"a": 1}}, "input", "invalid_type"),
        ({"input": []}, "input", "empty_array"),
        ({"input": ["a", 3]}, "input[1]", "invalid_type"),
        ({"input": ["a", [1, -1]]}, "input[1]", "invalid_type"),
        ({"input": ["a", []]}, "input[1]", "invalid_type"),
        ({"input": [[True]]}, "input[0]", "invalid_type"),  # a boolean is no token id
        ({"input": [[1.5]]}, "input[0]", "invalid_type"),
        ({"input": "a", "model": ""}, "model", "invalid_type"),
        ({"input": "a", "model": 7}, "model", "invalid_type"),
        ({"input": "a", "encoding_format": "hex"}, "encoding_format", "invalid_value"),
        ({"input": "a", "dimensions": 0}, "dimensions", "invalid_value"),
        ({"input": "a", "dimensions": True}, "dimensions", "invalid_value"),
        ({"input": "a", "dimensions": "8"}, "dimensions", "invalid_value"),
        ({"input": "a", "user": 1}, "user", "invalid_type"),
        ({"input": "a", "temperature": 1}, "temperature", "unknown_parameter"),
        ({"input": ["a"] * 2049}, "input", "array_above_max_length"),
    ],
)
def test_invalid_requests_name_the_field(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(ApiProblem) as caught:
        parse(body)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)
    error = orjson.loads(caught.value.body())["error"]
    assert error == {
        "message": caught.value.message,
        "type": "invalid_request_error",
        "param": param,
        "code": code,
    }


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'"text"'])
def test_bodies_that_are_no_json_object(raw: bytes) -> None:
    with pytest.raises(ApiProblem) as caught:
        parse_embeddings_request(raw)
    assert caught.value.status == 400 and caught.value.param is None


def test_the_inputs_bound_is_a_parameter() -> None:
    assert len(parse({"input": ["a"] * 10}, max_inputs=10).inputs) == 10
    with pytest.raises(ApiProblem):
        parse({"input": ["a"] * 11}, max_inputs=10)


def test_the_answer_has_openais_shape() -> None:
    body = orjson.loads(embeddings_response([[0.5, 1.0], "AAAAAA=="], "m", 7))
    assert body == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, 1.0]},
            {"object": "embedding", "index": 1, "embedding": "AAAAAA=="},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }


def test_models_and_errors() -> None:
    models = orjson.loads(models_response(["a", "b"]))
    assert [m["id"] for m in models["data"]] == ["a", "b"]
    assert all(m["object"] == "model" for m in models["data"])
    assert orjson.loads(error_body("no", "server_error", None, "timeout")) == {
        "error": {"message": "no", "type": "server_error", "param": None, "code": "timeout"}
    }
