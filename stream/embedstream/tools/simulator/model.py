"""Pure core of the simulated embeddings provider.

Everything here is deterministic and side-effect free: no asyncio, no HTTP, no
real clock. Time comes in as a ``now`` argument and randomness from an injected
``random.Random``, so the web shell in ``server.py`` stays thin and the rules
can be unit-tested directly.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import random
import re
import struct
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

EncodingFormat = Literal["float", "base64"]

# --------------------------------------------------------------------------- vectors


def expected_vector(model: str, text: str, dimensions: int) -> list[float]:
    """The unit vector the simulator returns for ``text`` embedded by ``model``.

    shake_256 over the length-prefixed model name followed by the text (so no
    (model, text) pair can collide with another) yields ``dimensions`` signed 32-bit ints
    that are scaled to unit L2 norm. The hash makes it stable across processes
    (unlike ``hash()``), and because shake output is a prefix-stable stream a
    smaller ``dimensions`` is the renormalised prefix of a larger one, like
    OpenAI's shortened embeddings. Components are rounded to float32 so the
    "float" and "base64" encodings carry exactly the same numbers.
    """
    if dimensions < 1:
        raise ValueError(f"dimensions must be >= 1, got {dimensions}")
    model_bytes = _utf8(model)
    seed = len(model_bytes).to_bytes(4, "little") + model_bytes + _utf8(text)
    raw = struct.unpack(f"<{dimensions}i", hashlib.shake_256(seed).digest(4 * dimensions))
    norm = math.hypot(*raw)
    if norm == 0.0:  # all-zero hash output: astronomically unlikely, but stay a unit vector
        return [1.0] + [0.0] * (dimensions - 1)
    scale = 1.0 / norm
    return _round_to_float32([component * scale for component in raw])


def encode_base64(vector: Sequence[float]) -> str:
    """OpenAI's base64 encoding: little-endian float32 bytes, base64-encoded."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def decode_base64(encoded: str) -> list[float]:
    """Inverse of :func:`encode_base64`."""
    data = base64.b64decode(encoded, validate=True)
    if len(data) % 4:
        raise ValueError(f"base64 payload of {len(data)} bytes is not a float32 array")
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def _round_to_float32(values: list[float]) -> list[float]:
    fmt = f"<{len(values)}f"
    return list(struct.unpack(fmt, struct.pack(fmt, *values)))


def _utf8(text: str) -> bytes:
    # JSON may legally carry lone surrogates; hash them rather than crash.
    return text.encode("utf-8", "surrogatepass")


# --------------------------------------------------------------------------- tokens

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Approximate token count: runs of word characters plus single punctuation marks.

    Counts matches of ``\\w+|[^\\w\\s]``; any non-empty text counts as at least one
    token (whitespace-only text too). It is no tokenizer, only a deterministic
    stand-in of roughly the right magnitude so that token limits and token-based
    latency behave plausibly.
    """
    if not text:
        return 0
    return max(1, len(_TOKEN.findall(text)))


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Limits:
    """Request limits; the defaults are OpenAI's for its embedding models."""

    max_inputs: int = 2048
    max_tokens_per_input: int = 8192
    max_tokens_per_request: int = 300_000

    @classmethod
    def openai(cls) -> Limits:
        return cls()

    def __post_init__(self) -> None:
        for name in ("max_inputs", "max_tokens_per_input", "max_tokens_per_request"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def replace(self, **changes: object) -> Limits:
        return dataclasses.replace(self, **_coerce_changes(Limits, changes))


@dataclass(frozen=True)
class SimulatorConfig:
    """Every knob of the simulator. Faults all default to off.

    Rates are probabilities per call in [0, 1]; a rate-limit value of 0 disables it.
    """

    default_dimensions: int = 256
    max_dimensions: int = 3072
    limits: Limits = field(default_factory=Limits)
    # Latency of one call: base_ms + per_token_ms * tokens + per_input_ms * inputs.
    base_ms: float = 5.0
    per_token_ms: float = 0.0
    per_input_ms: float = 0.0
    capacity: int = 16  # calls served at once; the rest queue
    rate_limit_rps: float = 0.0  # token bucket over calls, burst of max(1, rps)
    # Budgets announced in x-ratelimit-* headers (see quota.py); 0 disables each.
    rate_limit_rpm: float = 0.0
    rate_limit_tpm: float = 0.0
    rate_limit_burst_s: float = 60.0  # seconds of refill the budgets hold
    rate_limit_for_s: float = 0.0  # answer 429 to everything for this long after start/set
    error_rate: float = 0.0  # answer 500
    hang_rate: float = 0.0  # wait hang_s before answering
    hang_s: float = 3600.0
    shuffle_rate: float = 0.0  # return `data` out of index order
    reject_texts_containing: str | None = None  # 400 naming the first input containing it
    # Flaky items: a call holding a text containing this answers 500 until that text has
    # failed `fail_times` times; later calls succeed (tests "fails twice, then succeeds").
    fail_texts_containing: str | None = None
    fail_times: int = 0
    record_calls: bool = False  # keep a CallRecord per call (tests check call timing)
    auth_key: str | None = None  # required "Authorization: Bearer <key>" when set
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_dimensions < 1:
            raise ValueError("max_dimensions must be >= 1")
        if not 1 <= self.default_dimensions <= self.max_dimensions:
            raise ValueError("default_dimensions must be in 1..max_dimensions")
        if self.capacity < 1:
            raise ValueError("capacity must be >= 1")
        for name in ("error_rate", "hang_rate", "shuffle_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        non_negative = (
            *("base_ms", "per_token_ms", "per_input_ms"),
            *("rate_limit_rps", "rate_limit_rpm", "rate_limit_tpm"),
        )
        for name in (*non_negative, "rate_limit_for_s", "hang_s"):
            if not getattr(self, name) >= 0.0:  # also rejects NaN
                raise ValueError(f"{name} must be >= 0")
        if not self.rate_limit_burst_s > 0:
            raise ValueError("rate_limit_burst_s must be > 0")
        if self.reject_texts_containing == "":
            raise ValueError("reject_texts_containing must not be empty (use None to disable)")
        if self.fail_texts_containing == "":
            raise ValueError("fail_texts_containing must not be empty (use None to disable)")
        if self.fail_times < 0:
            raise ValueError("fail_times must be >= 0")

    def replace(self, **changes: object) -> SimulatorConfig:
        """A copy with ``changes`` applied, type-checked so JSON from /admin/faults is safe."""
        return dataclasses.replace(self, **_coerce_changes(SimulatorConfig, changes))

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _coerce_changes(cls: type[object], changes: Mapping[str, object]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    unknown = sorted(changes.keys() - hints.keys())
    if unknown:
        raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
    return {name: _coerce(name, hints[name], value) for name, value in changes.items()}


def _coerce(name: str, hint: object, value: object) -> object:
    # bool is an int subclass, so it is excluded explicitly from the numeric kinds.
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is bool and isinstance(value, bool):
        return value
    if hint == (str | None) and (value is None or isinstance(value, str)):
        return value
    if hint is Limits:
        if isinstance(value, Limits):
            return value
        if isinstance(value, dict):
            return Limits().replace(**value)
    raise ValueError(f"invalid value for {name}: {value!r}")


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """An OpenAI-style error response: HTTP status plus ``{"error": {...}}`` body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid_request(message: str, *, param: str | None, code: str | None) -> ApiError:
    return ApiError(400, message, error_type="invalid_request_error", param=param, code=code)


def server_error() -> ApiError:
    return ApiError(
        500,
        "The server had an error while processing your request. Sorry about that!",
        error_type="server_error",
    )


def rate_limited(retry_after_s: float) -> ApiError:
    """429 carrying both retry headers the OpenAI client understands."""
    retry_after_s = max(retry_after_s, 0.001)
    return ApiError(
        429,
        f"Rate limit reached for requests. Please try again in {retry_after_s:.3f}s.",
        error_type="rate_limit_exceeded",
        code="rate_limit_exceeded",
        headers={
            "retry-after": f"{retry_after_s:.3f}",
            "retry-after-ms": str(math.ceil(retry_after_s * 1000)),
        },
    )


def check_auth(config: SimulatorConfig, authorization: str | None) -> None:
    """Raise 401 unless the Authorization header carries ``config.auth_key``."""
    if config.auth_key is None or authorization == f"Bearer {config.auth_key}":
        return
    # Echo the key back, as careless providers and proxies do: clients must scrub it.
    presented = (authorization or "").removeprefix("Bearer ")
    raise ApiError(
        401,
        f"Incorrect API key provided: {presented}.",
        error_type="invalid_request_error",
        code="invalid_api_key",
    )


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class EmbeddingRequest:
    """A validated ``/v1/embeddings`` request."""

    model: str
    inputs: tuple[str, ...]
    token_counts: tuple[int, ...]
    encoding_format: EncodingFormat
    dimensions: int
    user: str | None = None

    @property
    def total_tokens(self) -> int:
        return sum(self.token_counts)


_KNOWN_PARAMS = frozenset({"input", "model", "encoding_format", "dimensions", "user"})


def parse_request(raw: bytes, config: SimulatorConfig) -> EmbeddingRequest:
    """Parse and validate a request body the way OpenAI does, raising :class:`ApiError` (400)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid_request(
            "We could not parse the JSON body of your request.", param=None, code=None
        ) from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", param=None, code=None)
    return validate_request(body, config)


def validate_request(body: Mapping[str, object], config: SimulatorConfig) -> EmbeddingRequest:
    unknown = sorted(body.keys() - _KNOWN_PARAMS)
    if unknown:
        raise invalid_request(
            f"Unrecognized request argument supplied: {unknown[0]}",
            param=unknown[0],
            code="unknown_parameter",
        )
    model = body.get("model")
    if model is None:
        raise invalid_request(
            "You must provide a model parameter.", param="model", code="missing_required_parameter"
        )
    if not isinstance(model, str) or not model:
        raise invalid_request(
            "Invalid 'model': expected a non-empty string.", param="model", code="invalid_type"
        )
    inputs = _validate_input_list(body.get("input"), config.limits)
    token_counts = _validate_input_tokens(inputs, config.limits)
    return EmbeddingRequest(
        model=model,
        inputs=inputs,
        token_counts=token_counts,
        encoding_format=_validate_encoding_format(body.get("encoding_format")),
        dimensions=_validate_dimensions(body.get("dimensions"), config),
        user=_validate_user(body.get("user")),
    )


def _validate_input_list(value: object, limits: Limits) -> tuple[str, ...]:
    if value is None:
        raise invalid_request(
            "You must provide an input parameter.", param="input", code="missing_required_parameter"
        )
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise invalid_request(
            "Invalid 'input': expected a string or an array of strings.",
            param="input",
            code="invalid_type",
        )
    if not value:
        raise invalid_request(
            "Invalid 'input': array must not be empty.", param="input", code="empty_array"
        )
    if len(value) > limits.max_inputs:
        raise invalid_request(
            f"Invalid 'input': array must have at most {limits.max_inputs} items, "
            f"got {len(value)}.",
            param="input",
            code="array_above_max_length",
        )
    for index, item in enumerate(value):
        if not isinstance(item, str):
            # Token-id arrays are valid for OpenAI but unsupported here: say so precisely.
            raise invalid_request(
                f"Invalid 'input[{index}]': expected a string, got {type(item).__name__}.",
                param=f"input[{index}]",
                code="invalid_type",
            )
    return tuple(value)


def _validate_input_tokens(inputs: tuple[str, ...], limits: Limits) -> tuple[int, ...]:
    counts = []
    for index, text in enumerate(inputs):
        if not text:
            raise invalid_request(
                f"Invalid 'input[{index}]': string must not be empty.",
                param=f"input[{index}]",
                code="empty_string",
            )
        tokens = count_tokens(text)
        if tokens > limits.max_tokens_per_input:
            raise invalid_request(
                f"Invalid 'input[{index}]': maximum input length is "
                f"{limits.max_tokens_per_input} tokens, got {tokens}.",
                param=f"input[{index}]",
                code="context_length_exceeded",
            )
        counts.append(tokens)
    total = sum(counts)
    if total > limits.max_tokens_per_request:
        raise invalid_request(
            f"Requested {total} tokens, max {limits.max_tokens_per_request} tokens per request.",
            param="input",
            code="max_tokens_per_request",
        )
    return tuple(counts)


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


def _validate_dimensions(value: object, config: SimulatorConfig) -> int:
    if value is None:
        return config.default_dimensions
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and 1 <= value <= config.max_dimensions
    ):
        return value
    raise invalid_request(
        f"Invalid 'dimensions': expected an integer in 1..{config.max_dimensions}, got {value!r}.",
        param="dimensions",
        code="invalid_value",
    )


def _validate_user(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise invalid_request("Invalid 'user': expected a string.", param="user", code="invalid_type")


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


@dataclass(frozen=True)
class CallRecord:
    """One embeddings call as the simulator saw it, for tests that check timing."""

    received_at: float  # the simulator's clock when the request arrived
    inputs: tuple[str, ...]
    status: int
    retry_after_s: float | None = None


# --------------------------------------------------------------------------- models

# The simulator embeds with any model name; these are the ones GET /v1/models advertises (the
# OpenAI embedding models), so clients that list models before calling find the usual names.
MODELS = ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002")
_OWNER = "embedstream-simulator"


def model_entry(model_id: str) -> dict[str, object]:
    """One model as OpenAI's ``GET /v1/models/{id}`` answers it."""
    return {"id": model_id, "object": "model", "created": 0, "owned_by": _OWNER}


def model_list() -> dict[str, object]:
    """OpenAI's ``GET /v1/models`` body: a list object of model entries."""
    return {"object": "list", "data": [model_entry(m) for m in MODELS]}


def find_model(model_id: str) -> dict[str, object]:
    """The entry of an advertised model; a 404 in OpenAI's format for any other name."""
    if model_id in MODELS:
        return model_entry(model_id)
    raise ApiError(
        404,
        f"The model '{model_id}' does not exist",
        error_type="invalid_request_error",
        param="model",
        code="model_not_found",
    )


# --------------------------------------------------------------------------- responses


def latency_s(config: SimulatorConfig, request: EmbeddingRequest) -> float:
    ms = (
        config.base_ms
        + config.per_token_ms * request.total_tokens
        + config.per_input_ms * len(request.inputs)
    )
    return ms / 1000.0


def build_response(request: EmbeddingRequest, order: Sequence[int]) -> dict[str, object]:
    """The OpenAI response body, listing ``data`` items in ``order`` (normally 0..n-1)."""
    data = []
    for index in order:
        vector = expected_vector(request.model, request.inputs[index], request.dimensions)
        embedding: list[float] | str = (
            encode_base64(vector) if request.encoding_format == "base64" else vector
        )
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = request.total_tokens
    return {
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


# --------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class FaultDecision:
    fail: bool  # answer 500
    hang: bool  # wait hang_s first
    order: tuple[int, ...]  # order of `data` items


def decide_faults(config: SimulatorConfig, n_inputs: int, rng: random.Random) -> FaultDecision:
    """Roll the dice for one call. A rate of 0 draws nothing, so enabling one fault
    does not perturb the sequence of another."""
    fail = _roll(rng, config.error_rate)
    hang = not fail and _roll(rng, config.hang_rate)
    order = list(range(n_inputs))
    if n_inputs > 1 and _roll(rng, config.shuffle_rate):
        rng.shuffle(order)
        if order == sorted(order):  # an identity "shuffle" would be invisible to tests
            order = order[1:] + order[:1]
    return FaultDecision(fail=fail, hang=hang, order=tuple(order))


def _roll(rng: random.Random, rate: float) -> bool:
    return rate > 0.0 and rng.random() < rate


class TokenBucket:
    """Admits ``rate`` calls per second on average with bursts of up to ``burst``."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._updated = now

    def take(self, now: float) -> float:
        """Take one token: 0.0 if admitted, else seconds until a token will be available."""
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate


# --------------------------------------------------------------------------- stats


@dataclass
class Stats:
    """Counters for GET /stats. ``inputs`` and ``tokens`` count successfully served calls;
    ``calls`` counts every embeddings request, whatever its outcome."""

    calls: int = 0
    inputs: int = 0
    tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    peak_concurrency: int = 0
    in_flight: int = 0
    rejected_429: int = 0

    def record_error(self, status: int) -> None:
        key = str(status)
        self.errors[key] = self.errors.get(key, 0) + 1
        if status == 429:
            self.rejected_429 += 1

    def record_served(self, request: EmbeddingRequest) -> None:
        self.inputs += len(request.inputs)
        self.tokens += request.total_tokens

    def enter(self) -> None:
        self.in_flight += 1
        self.peak_concurrency = max(self.peak_concurrency, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1

    def reset(self) -> None:
        """Zero the counters; calls still being served stay counted as in flight."""
        self.calls = self.inputs = self.tokens = self.rejected_429 = 0
        self.errors = {}
        self.peak_concurrency = self.in_flight

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)
