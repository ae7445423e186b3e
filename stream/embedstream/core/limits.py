"""Provider presets, enforced in one place: what one input and one call may contain, and
which request fields the provider takes.

A profile states what a provider accepts; :func:`effective_limits` narrows it by the user's
settings. Items are checked once on admission (:func:`check_item`) so a doomed item is
dead-lettered before it can poison a batch; :func:`batch_violations` states every limit a
proposed batch breaks, so tests can assert that no flushed batch ever breaks one.

Limits marked "ours" are not the provider's: where a server sets no limit (vLLM, Ollama) we keep
calls to a size that amortises the per-call cost without risking request-size limits of
proxies in between. The user's ``max_batch_size``, ``max_batch_tokens`` and
``max_input_tokens`` narrow every one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from embedstream.errors import Reason

KNOWN_FORMATS = frozenset({"float", "base64"})
# Request fields beyond text, model, format and dimensions that a provider may take; each is
# part of the bucket key, so a batch never mixes values.
REQUEST_PARAMETERS = ("user", "input_type", "task")


@dataclass(frozen=True, slots=True)
class ProviderLimits:
    max_inputs: int
    max_tokens_per_input: int
    max_tokens_per_request: int
    encoding_formats: frozenset[str]
    reject_empty: bool = True
    dimensions: bool = True  # takes `dimensions` (shortened vectors); else it is dead-lettered
    parameters: frozenset[str] = frozenset()  # of REQUEST_PARAMETERS
    token_ids: bool = False  # takes an input as an array of token ids (the online lane's)

    def __post_init__(self) -> None:
        for name in ("max_inputs", "max_tokens_per_input", "max_tokens_per_request"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        # An admitted input must fit in a call on its own, or it could never be sent.
        if self.max_tokens_per_input > self.max_tokens_per_request:
            raise ValueError("max_tokens_per_input must not exceed max_tokens_per_request")
        if not self.encoding_formats or not self.encoding_formats <= KNOWN_FORMATS:
            raise ValueError(
                f"encoding_formats must be a non-empty subset of {sorted(KNOWN_FORMATS)}, "
                f"got {sorted(self.encoding_formats)}"
            )
        if not self.parameters <= set(REQUEST_PARAMETERS):
            raise ValueError(f"parameters must be a subset of {list(REQUEST_PARAMETERS)}")

    @property
    def wire_format(self) -> str:
        """The encoding asked of the provider: base64 (a quarter of the bytes) where it takes
        it. Either way the embedder hands each caller the format it asked for."""
        return "base64" if "base64" in self.encoding_formats else "float"


_BOTH = frozenset({"float", "base64"})

PROFILES: Mapping[str, ProviderLimits] = MappingProxyType(
    {
        # OpenAI's API reference: at most 2048 inputs, 8192 tokens each and 300,000 tokens
        # summed over a request; no empty strings. `dimensions` exists for text-embedding-3 and
        # later (other models answer 400, dead-lettered as unsupported_dimensions); `user` is
        # part of the request.
        "openai": ProviderLimits(
            2048, 8192, 300_000, _BOTH, parameters=frozenset({"user"}), token_ids=True
        ),
        # Azure OpenAI: calls go to /openai/deployments/<deployment>/embeddings?api-version=...
        # with an `api-key` header (the openai package's Azure client). Its quotas page allows
        # 2048 inputs per request; its REST reference keeps inputs under 8191 tokens. A total
        # per request is not stated there: OpenAI's 300,000 is kept. `dimensions` and
        # `encoding_format` came with api-version 2024-03-01-preview (see
        # AZURE_DIMENSIONS_SINCE); its inference spec lists `user` and `input_type`.
        "azure": ProviderLimits(
            2048,
            8191,
            300_000,
            _BOTH,
            parameters=frozenset({"user", "input_type"}),
            token_ids=True,
        ),
        # vLLM's OpenAI-compatible server: no limit on inputs per request (2048 and the total
        # are ours); an input over the model's max_model_len is answered 400. `dimensions`
        # works for Matryoshka models only: others answer 400 "does not support matryoshka
        # representation" (dead-lettered as unsupported_dimensions). Takes `user`.
        "vllm": ProviderLimits(
            2048, 32_768, 1_000_000, _BOTH, parameters=frozenset({"user"}), token_ids=True
        ),
        # Hugging Face Text Embeddings Inference: --max-client-batch-size defaults to 32 inputs
        # per request (422 above it), --payload-limit to 2,000,000 bytes (500,000 estimated
        # tokens stay under it); long inputs are cut to the model's length (--auto-truncate,
        # on by default). base64 since 1.3, `dimensions` since 1.8 (older versions ignore it,
        # and the vector length check refuses their answer). Takes `user`.
        "tei": ProviderLimits(32, 32_768, 500_000, _BOTH, parameters=frozenset({"user"})),
        # Ollama's /v1/embeddings: no limit on inputs (2048 and the total are ours); inputs
        # are cut to the context length. `dimensions` since 0.11.11, base64 since 0.12.7 (older
        # versions answer floats, which the embedder encodes). Its request has no `user`:
        # Ollama would drop it silently, so it is refused instead.
        "ollama": ProviderLimits(2048, 32_768, 1_000_000, _BOTH),
        # DashScope's compatible mode takes 10 inputs per call. The 80_000 tokens per request
        # is our conservative choice (just under 10 x 8192), not a documented provider limit.
        "dashscope": ProviderLimits(10, 8192, 80_000, frozenset({"float"})),
        # Any other OpenAI-compatible server: permissive, every request field passed on (e.g.
        # NVIDIA NIM's input_type, Jina's task) and token-id inputs too; the user's settings
        # narrow it. (OpenAI, Azure and vLLM take token ids; TEI, Ollama and DashScope are
        # not known to, so the online lane refuses them there.)
        "generic": ProviderLimits(
            2048,
            32_768,
            1_000_000,
            _BOTH,
            parameters=frozenset(REQUEST_PARAMETERS),
            token_ids=True,
        ),
    }
)

# Azure's api-version that added `dimensions` and `encoding_format` to embeddings
# (azure-rest-api-specs #28118). Versions are dates, so they compare as strings.
AZURE_DIMENSIONS_SINCE = "2024-03-01"


class UnknownProfile(KeyError, ValueError):
    """A profile name we do not know: a failed lookup (KeyError) of a bad setting (ValueError)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:  # KeyError would quote the whole message
        return f"unknown provider profile {self.name!r}; known: {', '.join(sorted(PROFILES))}"


def profile(name: str) -> ProviderLimits:
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownProfile(name) from None


def effective_limits(
    profile: ProviderLimits,
    *,
    max_batch_size: int,
    max_batch_tokens: int,
    max_input_tokens: int,
    azure_api_version: str | None = None,
) -> ProviderLimits:
    """The tighter of the provider's limits and the user's settings, limit by limit. An Azure
    api-version older than AZURE_DIMENSIONS_SINCE has no `dimensions`."""
    dimensions = profile.dimensions
    if azure_api_version is not None and azure_api_version < AZURE_DIMENSIONS_SINCE:
        dimensions = False
    return dataclasses.replace(
        profile,
        max_inputs=min(profile.max_inputs, max_batch_size),
        max_tokens_per_input=min(profile.max_tokens_per_input, max_input_tokens),
        max_tokens_per_request=min(profile.max_tokens_per_request, max_batch_tokens),
        dimensions=dimensions,
    )


@dataclass(frozen=True, slots=True)
class ItemProblem:
    """Why an item can never be sent: ``empty_text``, ``too_long``,
    ``unsupported_encoding_format``, ``unsupported_dimensions`` or ``unsupported_parameter``."""

    reason: str
    message: str


def check_item(
    limits: ProviderLimits,
    *,
    text: str,
    tokens: int,
    encoding_format: str,
    dimensions: int | None = None,
    parameters: Sequence[str] = (),
    profile_name: str = "this provider",
    blank_ok: bool = False,
) -> ItemProblem | None:
    """The first problem that makes this item unsendable, or None if it may be batched.
    ``parameters`` are the request fields of REQUEST_PARAMETERS the item sets; ``blank_ok``:
    only an empty text is refused, as the provider refuses it (the online lane: LlamaIndex
    sends " " for a blank chunk, and OpenAI embeds it)."""
    if limits.reject_empty and not text:
        return ItemProblem(Reason.EMPTY_TEXT, "input text is empty")
    if limits.reject_empty and not blank_ok and text.isspace():  # (empty: refused above)
        return ItemProblem(Reason.EMPTY_TEXT, "input text is empty or whitespace only")
    if tokens > limits.max_tokens_per_input:
        return ItemProblem(
            Reason.TOO_LONG,
            f"input is an estimated {tokens} tokens; the limit is "
            f"{limits.max_tokens_per_input} tokens per input",
        )
    if encoding_format not in limits.encoding_formats:
        return ItemProblem(
            Reason.UNSUPPORTED_ENCODING_FORMAT,
            f"encoding_format {encoding_format!r} is not supported here; "
            f"use one of {', '.join(sorted(limits.encoding_formats))}",
        )
    if dimensions is not None and not limits.dimensions:
        return ItemProblem(
            Reason.UNSUPPORTED_DIMENSIONS,
            f"provider profile {profile_name} takes no `dimensions`; drop it from the request",
        )
    for name in parameters:
        if name not in limits.parameters:
            return ItemProblem(
                Reason.UNSUPPORTED_PARAMETER,
                f"provider profile {profile_name} takes no `{name}`; drop it from the request "
                "or use provider_profile generic",
            )
    return None


def batch_violations(
    limits: ProviderLimits, token_counts: Sequence[int], encoding_format: str
) -> list[str]:
    """Every limit the proposed batch breaks; empty when the call is within all of them."""
    problems: list[str] = []
    if not token_counts:
        problems.append("batch is empty")
    if len(token_counts) > limits.max_inputs:
        problems.append(f"{len(token_counts)} inputs > max_inputs {limits.max_inputs}")
    total = sum(token_counts)
    if total > limits.max_tokens_per_request:
        problems.append(f"{total} tokens > max_tokens_per_request {limits.max_tokens_per_request}")
    for index, tokens in enumerate(token_counts):
        if tokens > limits.max_tokens_per_input:
            problems.append(
                f"input {index}: {tokens} tokens > max_tokens_per_input "
                f"{limits.max_tokens_per_input}"
            )
    if encoding_format not in limits.encoding_formats:
        problems.append(f"encoding_format {encoding_format!r} not allowed")
    return problems
