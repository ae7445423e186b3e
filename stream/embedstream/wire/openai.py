"""OpenAI's embeddings API as the online lane speaks it: a request body parsed and checked, the
answers and errors in OpenAI's shapes. Pure: bytes in, bytes out.

The shapes are OpenAI's own (`POST /v1/embeddings`, `GET /v1/models`): `input` as a string,
an array of strings, an array of token ids, or an array of such arrays; `model`,
`encoding_format` (float or base64), `dimensions` and `user`; errors as
``{"error": {"message", "type", "param", "code"}}``, so the official SDKs read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import orjson

from embedstream.wire.vectors import Vector

# One input of a call: a text, or the token ids of one (OpenAI's `input` takes both; the online
# lane passes ids through to providers that take them).
TokenIds = tuple[int, ...]
Input = str | TokenIds

MAX_INPUTS = 2048  # OpenAI's most inputs per request
_FIELDS = frozenset({"input", "model", "encoding_format", "dimensions", "user"})

ErrorType = Literal[
    "invalid_request_error", "authentication_error", "rate_limit_error", "server_error"
]


class ApiProblem(Exception):
    """An answer other than 200, in OpenAI's error shape: its status, and what to put in it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: ErrorType = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> bytes:
        return error_body(self.message, self.error_type, self.param, self.code)


def bad_request(message: str, param: str | None, code: str | None = None) -> ApiProblem:
    return ApiProblem(400, message, param=param, code=code)


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    inputs: tuple[Input, ...]  # texts, or token ids (one tuple per input)
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None


def parse_embeddings_request(body: bytes, *, max_inputs: int = MAX_INPUTS) -> EmbeddingsRequest:
    """The request a body holds; :class:`ApiProblem` (400) naming the field at fault."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise bad_request("We could not parse the JSON body of your request.", None) from None
    if not isinstance(document, dict):
        raise bad_request("The request body must be a JSON object.", None)
    unknown = sorted(set(document) - _FIELDS)
    if unknown:
        raise bad_request(
            f"Unrecognized request argument supplied: {unknown[0]}", unknown[0], "unknown_parameter"
        )
    return EmbeddingsRequest(
        inputs=_inputs(document.get("input"), max_inputs),
        model=_optional_text(document, "model"),
        encoding_format=_encoding_format(document.get("encoding_format")),
        dimensions=_dimensions(document.get("dimensions")),
        user=_optional_text(document, "user"),
    )


def _inputs(value: object, max_inputs: int) -> tuple[Input, ...]:
    if value is None:
        raise bad_request("You must provide an input parameter.", "input", "missing_required")
    if isinstance(value, str) or _is_token_ids(value):
        value = [value]  # one text, or the token ids of one input
    if not isinstance(value, list):
        raise bad_request(
            "Invalid 'input': expected a string, an array of strings or of token arrays.",
            "input",
            "invalid_type",
        )
    if not value:
        raise bad_request("Invalid 'input': array must not be empty.", "input", "empty_array")
    if len(value) > max_inputs:
        raise bad_request(
            f"Invalid 'input': array must have at most {max_inputs} items, got {len(value)}.",
            "input",
            "array_above_max_length",
        )
    inputs: list[Input] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            inputs.append(item)
        elif _is_token_ids(item):
            assert isinstance(item, list)
            inputs.append(tuple(item))
        else:
            raise bad_request(
                f"Invalid 'input[{index}]': expected a string or an array of token ids "
                "(non-negative integers).",
                f"input[{index}]",
                "invalid_type",
            )
    return tuple(inputs)


def _is_token_ids(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(type(i) is int and i >= 0 for i in value)


def _optional_text(document: dict[str, object], name: str) -> str | None:
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise bad_request(f"Invalid '{name}': expected a non-empty string.", name, "invalid_type")
    return value


def _encoding_format(value: object) -> Literal["float", "base64"] | None:
    if value is None or value == "float":
        return "float" if value else None
    if value == "base64":
        return "base64"
    raise bad_request(
        f"Invalid 'encoding_format': expected 'float' or 'base64', got {value!r}.",
        "encoding_format",
        "invalid_value",
    )


def _dimensions(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise bad_request(
            "Invalid 'dimensions': expected a positive integer.", "dimensions", "invalid_value"
        )
    return value


def embeddings_response(vectors: Sequence[Vector], model: str, prompt_tokens: int) -> bytes:
    """The 200 answer: one embedding per input, in input order."""
    return orjson.dumps(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": index, "embedding": vector}
                for index, vector in enumerate(vectors)
            ],
            "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )


def models_response(models: Sequence[str], owned_by: str = "embedstream") -> bytes:
    """`GET /v1/models`: the models callers may name."""
    return orjson.dumps(
        {
            "object": "list",
            "data": [
                {"id": model, "object": "model", "created": 0, "owned_by": owned_by}
                for model in models
            ],
        }
    )


def error_body(message: str, error_type: str, param: str | None, code: str | None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    )


def token_count(value: Input) -> int | None:
    """The exact token count of token ids; None for a text (only estimated)."""
    return len(value) if isinstance(value, tuple) else None


__all__ = [
    "MAX_INPUTS",
    "ApiProblem",
    "EmbeddingsRequest",
    "Input",
    "TokenIds",
    "bad_request",
    "embeddings_response",
    "error_body",
    "models_response",
    "parse_embeddings_request",
]
