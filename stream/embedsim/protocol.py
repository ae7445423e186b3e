"""A request to the simulated provider, validated the way the imitated flavor validates it, and
its answer. Pure: raises :class:`~embedsim.errors.ApiError` for anything the
provider would refuse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson

from embedsim.config import SimulatorConfig
from embedsim.errors import (
    ApiError,
    invalid_request,
    not_found,
    unprocessable,
)
from embedsim.flavors import Flavor, Limits
from embedsim.vectors import (
    count_tokens,
    encode_base64,
    expected_vector,
    expected_vector_base64,
)

EncodingFormat = Literal["float", "base64"]


@dataclass(frozen=True)
class EmbeddingRequest:
    """A validated embeddings request; ``model`` is the model its vectors come from."""

    model: str
    inputs: tuple[str, ...]
    token_counts: tuple[int, ...]
    encoding_format: EncodingFormat
    dimensions: int
    user: str | None = None
    input_type: str | None = None

    @property
    def total_tokens(self) -> int:
        return sum(self.token_counts)


def parse_request(
    raw: bytes, config: SimulatorConfig, deployment: str | None = None
) -> EmbeddingRequest:
    """Parse and validate a request body as the flavor does, raising :class:`ApiError`."""
    limit = config.flavor_rules.payload_limit
    if limit is not None and len(raw) > limit:
        raise ApiError(413, "length limit exceeded", error_type="invalid_request_error")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid_request(
            "We could not parse the JSON body of your request.", param=None, code=None
        ) from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", param=None, code=None)
    return validate_request(body, config, deployment)


def validate_request(
    body: Mapping[str, object], config: SimulatorConfig, deployment: str | None = None
) -> EmbeddingRequest:
    flavor = config.flavor_rules
    unknown = sorted(body.keys() - flavor.fields)
    if unknown and flavor.strict:
        raise invalid_request(
            f"Unrecognized request argument supplied: {unknown[0]}",
            param=unknown[0],
            code="unknown_parameter",
        )
    model = _model(body.get("model"), config, deployment)
    limits = config.request_limits
    raw_inputs = _validate_input_list(body.get("input"), limits, flavor)
    token_counts = _validate_input_tokens(raw_inputs, limits, flavor)
    inputs = tuple(i if isinstance(i, str) else token_ids_text(i) for i in raw_inputs)
    input_type = body.get("input_type") if "input_type" in flavor.fields else None
    return EmbeddingRequest(
        model=model,
        inputs=inputs,
        token_counts=token_counts,
        encoding_format=_validate_encoding_format(body.get("encoding_format")),
        dimensions=_validate_dimensions(body.get("dimensions"), config, model),
        user=_validate_str(body.get("user"), "user") if "user" in flavor.fields else None,
        input_type=_validate_str(input_type, "input_type"),
    )


def _model(value: object, config: SimulatorConfig, deployment: str | None) -> str:
    """The model the vectors come from, as the flavor picks it."""
    flavor = config.flavor_rules
    if value is not None and (not isinstance(value, str) or not value):
        raise invalid_request(
            "Invalid 'model': expected a non-empty string.", param="model", code="invalid_type"
        )
    if flavor.models == "ignored":  # TEI serves one model whatever is asked
        return config.served_model or (value if isinstance(value, str) else "tei")
    if value is None:
        if deployment is not None:  # Azure: the deployment names the model
            return deployment
        raise invalid_request(
            "You must provide a model parameter.", param="model", code="missing_required_parameter"
        )
    assert isinstance(value, str)
    if flavor.models == "served" and config.served_model not in (None, value):
        if flavor.name == "ollama":
            raise not_found(f'model "{value}" not found, try pulling it first')
        raise not_found(f"The model `{value}` does not exist.", code="model_not_found")
    return value


def token_ids_text(ids: Sequence[int]) -> str:
    """What the simulator embeds for an input of token ids: a text no caller sends (it starts
    with NUL), so a vector of ids never equals a vector of text."""
    return "\x00tokens:" + ",".join(map(str, ids))


def _validate_input_list(
    value: object, limits: Limits, flavor: Flavor
) -> tuple[str | tuple[int, ...], ...]:
    if value is None:
        raise invalid_request(
            "You must provide an input parameter.", param="input", code="missing_required_parameter"
        )
    if isinstance(value, str) or (flavor.token_ids and _is_ids(value)):
        value = [value]  # one text, or one input of token ids
    if not isinstance(value, list):
        raise invalid_request(
            "Invalid 'input': expected a string or an array of strings.",
            param="input",
            code="invalid_type",
        )
    if not value:
        message = (
            "`inputs` cannot be empty"
            if flavor.name == "tei"
            else ("Invalid 'input': array must not be empty.")
        )
        raise invalid_request(message, param="input", code="empty_array")
    if len(value) > limits.max_inputs:
        if flavor.name == "tei":
            raise unprocessable(
                f"batch size {len(value)} > maximum allowed batch size {limits.max_inputs}"
            )
        raise invalid_request(
            f"Invalid 'input': array must have at most {limits.max_inputs} items, "
            f"got {len(value)}.",
            param="input",
            code="array_above_max_length",
        )
    inputs: list[str | tuple[int, ...]] = []
    for index, item in enumerate(value):
        if flavor.token_ids and _is_ids(item):
            inputs.append(tuple(item))
        elif isinstance(item, str):
            inputs.append(item)
        else:
            wanted = "a string or an array of token ids" if flavor.token_ids else "a string"
            raise invalid_request(
                f"Invalid 'input[{index}]': expected {wanted}, got {type(item).__name__}.",
                param=f"input[{index}]",
                code="invalid_type",
            )
    return tuple(inputs)


def _is_ids(value: object) -> bool:
    """A non-empty array of non-negative integers (OpenAI's token-id input)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    )


def _validate_input_tokens(
    inputs: tuple[str | tuple[int, ...], ...], limits: Limits, flavor: Flavor
) -> tuple[int, ...]:
    counts = []
    for index, text in enumerate(inputs):
        if isinstance(text, tuple):  # token ids: one token each
            tokens = len(text)
            if tokens > limits.max_tokens_per_input:
                raise _too_long(flavor, index, tokens, limits.max_tokens_per_input)
            counts.append(tokens)
            continue
        if not text and flavor.strict:  # OpenAI and Azure refuse empty strings
            raise invalid_request(
                f"Invalid 'input[{index}]': string must not be empty.",
                param=f"input[{index}]",
                code="empty_string",
            )
        tokens = count_tokens(text)
        if tokens > limits.max_tokens_per_input:
            if flavor.truncates:  # TEI and Ollama cut the input to the model's length
                tokens = limits.max_tokens_per_input
            else:
                raise _too_long(flavor, index, tokens, limits.max_tokens_per_input)
        counts.append(tokens)
    total = sum(counts)
    if total > limits.max_tokens_per_request:
        raise invalid_request(
            f"Requested {total} tokens, max {limits.max_tokens_per_request} tokens per request.",
            param="input",
            code="max_tokens_per_request",
        )
    return tuple(counts)


def _too_long(flavor: Flavor, index: int, tokens: int, limit: int) -> ApiError:
    if flavor.name == "vllm":
        return invalid_request(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{tokens} tokens in the input for embedding generation. Please reduce the length "
            "of the input.",
            param=None,
            code=None,
        )
    return invalid_request(
        f"Invalid 'input[{index}]': maximum input length is {limit} tokens, got {tokens}.",
        param=f"input[{index}]",
        code="context_length_exceeded",
    )


def _validate_encoding_format(value: object) -> EncodingFormat:
    if value is None or value == "float":
        return "float"
    if value == "base64":
        return "base64"
    raise invalid_request(
        f"Invalid 'encoding_format': expected 'float' or 'base64', got {value!r}.",
        param="encoding_format",
        code="invalid_value",
    )


def _validate_dimensions(value: object, config: SimulatorConfig, model: str) -> int:
    if value is None:
        return config.default_dimensions
    if config.flavor == "vllm" and not config.matryoshka:
        raise invalid_request(
            f'Model "{model}" does not support matryoshka representation, changing output '
            "dimensions will lead to poor results.",
            param=None,
            code=None,
        )
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and 1 <= value <= config.dimension_cap
    ):
        return value
    raise invalid_request(
        f"Invalid 'dimensions': expected an integer in 1..{config.dimension_cap}, got {value!r}.",
        param="dimensions",
        code="invalid_value",
    )


def _validate_str(value: object, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise invalid_request(f"Invalid '{name}': expected a string.", param=name, code="invalid_type")


def check_rejected_texts(config: SimulatorConfig, request: EmbeddingRequest) -> None:
    """Simulate a provider refusing one item: 400 naming the first input containing the needle."""
    needle = config.reject_texts_containing
    if needle is None:
        return
    for index, text in enumerate(request.inputs):
        if needle in text:
            raise invalid_request(
                f"Invalid 'input[{index}]': the input was rejected by the provider.",
                param=f"input[{index}]",
                code="input_rejected",
            )


def flaky_failure(
    config: SimulatorConfig, request: EmbeddingRequest, failures: dict[str, int]
) -> bool:
    """True if this call must fail because it holds a flaky text with failures to go.

    Counts one failure for every flaky text in the call, so each text fails exactly
    ``fail_times`` times whatever batches it travels in."""
    needle = config.fail_texts_containing
    if needle is None or config.fail_times <= 0:
        return False
    due = [t for t in request.inputs if needle in t and failures.get(t, 0) < config.fail_times]
    for text in due:
        failures[text] = failures.get(text, 0) + 1
    return bool(due)


# --------------------------------------------------------------------------- models

# The simulator embeds with any model name; these are the ones GET /v1/models advertises (the
# OpenAI embedding models), so clients that list models before calling find the usual names.
MODELS = ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002")
_OWNER = "embedstream-simulator"


def model_entry(model_id: str) -> dict[str, object]:
    """One model as OpenAI's ``GET /v1/models/{id}`` answers it."""
    return {"id": model_id, "object": "model", "created": 0, "owned_by": _OWNER}


def advertised(config: SimulatorConfig | None = None) -> tuple[str, ...]:
    """The served model of a one-model server, else the OpenAI embedding models."""
    if config is not None and config.served_model is not None:
        return (config.served_model,)
    return MODELS


def model_list(config: SimulatorConfig | None = None) -> dict[str, object]:
    """OpenAI's ``GET /v1/models`` body: a list object of model entries."""
    return {"object": "list", "data": [model_entry(m) for m in advertised(config)]}


def find_model(model_id: str, config: SimulatorConfig | None = None) -> dict[str, object]:
    """The entry of an advertised model; a 404 in OpenAI's format for any other name."""
    if model_id in advertised(config):
        return model_entry(model_id)
    raise not_found(f"The model '{model_id}' does not exist", code="model_not_found")


def build_response(
    request: EmbeddingRequest,
    order: Sequence[int],
    vectors: Sequence[list[float]] | None = None,
) -> dict[str, object]:
    """The OpenAI response body, listing ``data`` items in ``order`` (normally 0..n-1).

    ``vectors``: one per input from a real model; None, the deterministic hash vectors."""
    data = []
    for index in order:
        text = request.inputs[index]
        embedding: list[float] | str
        if vectors is not None:
            vector = vectors[index]
            embedding = encode_base64(vector) if request.encoding_format == "base64" else vector
        elif request.encoding_format == "base64":
            embedding = expected_vector_base64(request.model, text, request.dimensions)
        else:
            embedding = expected_vector(request.model, text, request.dimensions)
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = request.total_tokens
    return {
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
