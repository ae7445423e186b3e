"""How each imitated provider differs: URL shape, authentication, limits, the request fields it
reads, and the shape of its error bodies. Pure data and small rules; the HTTP shell
(``server.py``) routes by them and the request rules (``protocol.py``) apply them.

What each flavor imitates, from the providers' own code and documentation:

- ``openai``: ``POST /v1/embeddings``, ``Authorization: Bearer``; 2048 inputs of at most 8192
  tokens, 300,000 tokens per request; an unknown request field is a 400.
- ``azure``: ``POST /openai/deployments/{deployment}/embeddings?api-version=...`` with an
  ``api-key`` header; 2048 inputs of under 8191 tokens; reads ``input_type`` too; a request
  without ``api-version`` is a 404.
- ``tei`` (Hugging Face Text Embeddings Inference): at most 32 inputs per request
  (``--max-client-batch-size``, answered 422 in TEI's own error shape), a 2,000,000-byte
  payload limit; it serves one model and ignores the request's ``model``; long inputs are cut,
  not refused; unknown fields are ignored.
- ``vllm``: one served model (another name is a 404), ``dimensions`` only for Matryoshka
  models (else a 400), inputs over the model length refused; errors as
  ``{"object": "error", ...}``; unknown fields ignored.
- ``ollama``: no authentication, one served model (another is a 404 "try pulling it first"),
  no ``user`` field (ignored), long inputs cut.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

FlavorName = Literal["openai", "azure", "tei", "vllm", "ollama"]
FLAVOR_NAMES: tuple[FlavorName, ...] = ("openai", "azure", "tei", "vllm", "ollama")

_UNBOUNDED = 1_000_000_000  # a server that sets no limit of this kind


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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1")

    def replace(self, **changes: object) -> Limits:
        unknown = sorted(changes.keys() - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


_OPENAI_FIELDS = frozenset({"input", "model", "encoding_format", "dimensions", "user"})


@dataclass(frozen=True)
class Flavor:
    name: FlavorName
    limits: Limits
    auth: Literal["bearer", "api-key", "none"]
    fields: frozenset[str]  # request fields it reads
    strict: bool  # an unknown field is a 400 (OpenAI, Azure); others ignore it
    models: Literal["any", "served", "ignored"]  # "served": another name is a 404
    truncates: bool  # cuts over-long inputs instead of refusing them
    errors: Literal["openai", "tei", "vllm"]  # the shape of its error bodies
    payload_limit: int | None = None  # bytes; larger bodies are a 413
    token_ids: bool = False  # takes an input as an array of token ids, as OpenAI does

    @property
    def path(self) -> str:
        """The embeddings route, as the server registers it."""
        if self.name == "azure":
            return "/openai/deployments/{deployment}/embeddings"
        return "/v1/embeddings"


FLAVORS: dict[FlavorName, Flavor] = {
    "openai": Flavor(
        "openai", Limits(), "bearer", _OPENAI_FIELDS, True, "any", False, "openai", token_ids=True
    ),
    "azure": Flavor(
        "azure", Limits(2048, 8191, 300_000), "api-key", _OPENAI_FIELDS | {"input_type"},
        True, "any", False, "openai", token_ids=True,
    ),
    "tei": Flavor(
        "tei", Limits(32, _UNBOUNDED, _UNBOUNDED), "bearer", _OPENAI_FIELDS, False, "ignored",
        True, "tei", payload_limit=2_000_000,
    ),
    "vllm": Flavor(
        "vllm", Limits(_UNBOUNDED, 8192, _UNBOUNDED), "bearer",
        _OPENAI_FIELDS | {"truncate_prompt_tokens"}, False, "served", False, "vllm",
        token_ids=True,
    ),
    "ollama": Flavor(
        "ollama", Limits(_UNBOUNDED, _UNBOUNDED, _UNBOUNDED), "none",
        frozenset({"input", "model", "encoding_format", "dimensions"}), False, "served", True,
        "openai",
    ),
}  # fmt: skip


def flavor_named(name: str) -> Flavor:
    try:
        return FLAVORS[name]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unknown flavor {name!r}; known: {', '.join(FLAVOR_NAMES)}") from None


# TEI names its error types; these are the ones the simulator answers with, by status.
_TEI_TYPES = {400: "Empty", 413: "Validation", 422: "Validation", 429: "Overloaded"}
_VLLM_TYPES = {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError"}


def error_body(
    flavor: Flavor, status: int, message: str, error_type: str, param: str | None, code: str | None
) -> object:
    """An error in the flavor's own shape."""
    if flavor.errors == "tei":
        return {"message": message, "code": status, "type": _TEI_TYPES.get(status, "Backend")}
    if flavor.errors == "vllm":
        kind = _VLLM_TYPES.get(status, "InternalServerError")
        return {"object": "error", "message": message, "type": kind, "param": param,
                "code": status}  # fmt: skip
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
