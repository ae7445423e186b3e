"""Admission of one request event: parse, validate, apply provider limits. Pure.

Everything that can be decided from the record alone is decided here, before the item takes
any buffer space, so poison input is parked in the dead-letter topic at once with a reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from embedstream.core import configured
from embedstream.core.limits import ProviderLimits, check_item
from embedstream.core.tokens import TokenCounter
from embedstream.errors import InvalidEvent, Reason
from embedstream.settings import Settings
from embedstream.wire import EmbedRequest, decode_request


@dataclass(frozen=True, slots=True)
class Admitted:
    request: EmbedRequest
    model: str
    encoding_format: str
    tokens: int
    truncated_from: int | None = None  # the estimate before truncation, when truncated


@dataclass(frozen=True, slots=True)
class Rejected:
    error_class: str  # InvalidEvent (malformed) or PermanentItemError (valid but unservable)
    reason: str
    message: str


class Intake:
    def __init__(self, settings: Settings, limits: ProviderLimits, count: TokenCounter) -> None:
        self._settings = settings
        self._limits = limits
        self._count = count
        self._allowed_models = settings.allowed_model_set
        self._profile = configured.profile_label(settings)

    def admit(self, value: bytes | None) -> Admitted | Rejected:
        try:
            request = decode_request(value, max_bytes=self._settings.max_event_bytes)
        except InvalidEvent as exc:
            return Rejected("InvalidEvent", exc.reason, exc.message)
        model = request.model or self._settings.model
        if self._allowed_models and model not in self._allowed_models:
            return Rejected(
                "PermanentItemError", Reason.UNKNOWN_MODEL, f"model {model!r} not allowed"
            )
        encoding_format = request.encoding_format or self._settings.encoding_format
        tokens = self._count(request.text)
        problem = check_item(
            self._limits,
            text=request.text,
            tokens=tokens,
            encoding_format=encoding_format,
            dimensions=request.dimensions,
            parameters=request.parameters(),
            profile_name=self._profile,
        )
        if problem is None:
            return Admitted(request, model, encoding_format, tokens)
        if problem.reason == "too_long" and self._settings.oversize_policy == "truncate":
            text = truncate(request.text, self._limits.max_tokens_per_input, self._count)
            shorter = dataclasses.replace(request, text=text)
            return Admitted(shorter, model, encoding_format, self._count(text), tokens)
        return Rejected("PermanentItemError", problem.reason, problem.message)


def truncate(text: str, max_tokens: int, count: TokenCounter) -> str:
    """The longest prefix of `text` whose estimate fits `max_tokens` (binary search on chars)."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return text[:low]
