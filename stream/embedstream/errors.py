"""One error hierarchy. Every failure is classified once, here, by what should happen next.

- ``PermanentItemError``: this item can never succeed (bad input, too long): dead-letter it now.
- ``TransientError``: this attempt failed but a later one may work (timeout, 429, 5xx): retry.
- ``ProviderWideError``: the provider refuses everyone (bad key, unknown model): pause, never
  dead-letter the stream.
"""

from __future__ import annotations

# Whole-batch failures one bad input can cause: split the batch to find it.
SPLITTABLE_REASONS = frozenset({"rejected", "timeout", "malformed_response"})


class EmbedStreamError(Exception):
    """Root of every error embedstream raises on purpose."""

    retriable: bool = False
    reason: str = "error"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class ConfigError(EmbedStreamError):
    """A setting is missing or invalid; raised before anything is consumed."""

    reason = "config"

    def __init__(self, setting: str, problem: str) -> None:
        from embedstream.config import env_var  # local: config imports this module

        super().__init__(f"setting {setting} ({env_var(setting)}): {problem}")
        self.setting = setting


class InvalidEvent(EmbedStreamError):
    """A request event cannot be parsed or validated; ``reason`` is a stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PermanentItemError(EmbedStreamError):
    """The provider (or our limits) will never accept this item."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class TransientError(EmbedStreamError):
    """This attempt failed; the same request may succeed later."""

    retriable = True

    def __init__(self, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.reason = reason


class ProviderWideError(EmbedStreamError):
    """Every request would fail (auth, missing model): stop sending, keep the items."""

    retriable = True

    def __init__(self, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.reason = reason


class BrokerUnavailable(EmbedStreamError):
    """Kafka cannot be reached at start-up."""

    reason = "broker_unavailable"
