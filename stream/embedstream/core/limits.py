"""Provider limits, enforced in one place: what one input and one call may contain.

A profile states what a provider accepts; :func:`effective_limits` narrows it by the user's
settings. Items are checked once on admission (:func:`check_item`) so a doomed item is
dead-lettered before it can poison a batch; :func:`batch_violations` states every limit a
proposed batch breaks, so tests can assert that no flushed batch ever breaks one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from embedstream.errors import Reason

KNOWN_FORMATS = frozenset({"float", "base64"})


@dataclass(frozen=True, slots=True)
class ProviderLimits:
    max_inputs: int
    max_tokens_per_input: int
    max_tokens_per_request: int
    encoding_formats: frozenset[str]
    reject_empty: bool = True

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


PROFILES: Mapping[str, ProviderLimits] = MappingProxyType(
    {
        # OpenAI's documented limits for its embedding models.
        "openai": ProviderLimits(2048, 8192, 300_000, frozenset({"float", "base64"})),
        # DashScope's compatible mode takes 10 inputs per call. The 80_000 tokens per request
        # is our conservative choice (just under 10 x 8192), not a documented provider limit.
        "dashscope": ProviderLimits(10, 8192, 80_000, frozenset({"float"})),
        # Self-hosted servers (vLLM, TEI, Ollama...): permissive, the user's settings narrow it.
        "generic": ProviderLimits(2048, 32_768, 1_000_000, frozenset({"float", "base64"})),
    }
)


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
    profile: ProviderLimits, *, max_batch_size: int, max_batch_tokens: int, max_input_tokens: int
) -> ProviderLimits:
    """The tighter of the provider's limits and the user's settings, limit by limit."""
    return dataclasses.replace(
        profile,
        max_inputs=min(profile.max_inputs, max_batch_size),
        max_tokens_per_input=min(profile.max_tokens_per_input, max_input_tokens),
        max_tokens_per_request=min(profile.max_tokens_per_request, max_batch_tokens),
    )


@dataclass(frozen=True, slots=True)
class ItemProblem:
    """Why an item can never be sent: ``empty_text``, ``too_long`` or
    ``unsupported_encoding_format``."""

    reason: str
    message: str


def check_item(
    limits: ProviderLimits, *, text: str, tokens: int, encoding_format: str
) -> ItemProblem | None:
    """The first problem that makes this item unsendable, or None if it may be batched."""
    if limits.reject_empty and not text.strip():
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
