"""One error hierarchy. Every failure is classified once, here, by what should happen next.

- ``PermanentItemError``: this item can never succeed (bad input, too long): dead-letter it now.
- ``TransientError``: this attempt failed but a later one may work (timeout, 429, 5xx): retry.
- ``ProviderWideError``: the provider refuses everyone (bad key, unknown model): pause, never
  dead-letter the stream.
"""

from __future__ import annotations

from enum import StrEnum

# Settings are read from EMBEDSTREAM_<NAME>; errors name the variable, so the prefix lives here
# (config imports errors, never the reverse).
ENV_PREFIX = "EMBEDSTREAM_"


def env_var(setting: str) -> str:
    """The environment variable of a setting: ``max_wait_ms`` -> ``EMBEDSTREAM_MAX_WAIT_MS``."""
    return ENV_PREFIX + setting.upper()


class Reason(StrEnum):
    """Every failure reason code, defined once: dead-letter headers, metrics labels and docs
    use these values. HTTP statuses without a reason of their own appear as ``http_<status>``
    (see :func:`http_reason`)."""

    # The event itself is malformed (InvalidEvent).
    EMPTY_VALUE = "empty_value"
    OVERSIZED = "oversized"
    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_ID = "missing_id"
    INVALID_ID = "invalid_id"
    MISSING_TEXT = "missing_text"
    INVALID_TEXT = "invalid_text"
    INVALID_MODEL = "invalid_model"
    INVALID_ENCODING_FORMAT = "invalid_encoding_format"
    INVALID_DIMENSIONS = "invalid_dimensions"
    INVALID_METADATA = "invalid_metadata"
    INVALID_DEADLINE = "invalid_deadline"
    INVALID_USER = "invalid_user"
    INVALID_INPUT_TYPE = "invalid_input_type"
    INVALID_TASK = "invalid_task"
    INVALID_HEADERS = "invalid_headers"  # embedstream's own headers (e.g. on a retry record)
    INVALID_DOC_ID = "invalid_doc_id"
    INVALID_VERSION = "invalid_version"
    # Schema Registry framed values (input_format avro / json_schema / protobuf).
    NO_MAGIC_BYTE = "no_magic_byte"  # the first byte is not the wire format's magic byte 0
    TRUNCATED_FRAME = "truncated_frame"  # shorter than magic byte + 4-byte schema id
    INVALID_MESSAGE_INDEXES = "invalid_message_indexes"  # protobuf: bad varints or no such type
    UNKNOWN_SCHEMA = "unknown_schema"  # the registry answers 404 for the schema id
    WRONG_SCHEMA_TYPE = "wrong_schema_type"  # e.g. an Avro schema id on a protobuf topic
    INVALID_SCHEMA = "invalid_schema"  # the registry's schema text does not parse
    UNDECODABLE_PAYLOAD = "undecodable_payload"  # the payload does not decode with its schema
    SCHEMA_VIOLATION = "schema_violation"  # JSON Schema: the document fails validation
    MISSING_FIELD = "missing_field"  # a mapped field (e.g. text_field=body.content) is absent
    INVALID_FIELD = "invalid_field"  # a mapped field has the wrong type (e.g. text not a string)
    # A results-topic record is malformed (InvalidEvent from wire.documents).
    INVALID_RESULT = "invalid_result"
    UNKNOWN_RECORD_TYPE = "unknown_record_type"
    MISSING_KEY = "missing_key"  # a tombstone without a key names no document
    KEY_MISMATCH = "key_mismatch"  # the key is not the record's id / doc_id
    # Well formed, but this deployment can never serve it (PermanentItemError).
    EMPTY_TEXT = "empty_text"
    TOO_LONG = "too_long"
    TOO_MANY_CHUNKS = "too_many_chunks"  # a document cut into more than max_document_chunks
    UNSUPPORTED_ENCODING_FORMAT = "unsupported_encoding_format"
    # The provider profile (or, answering 400, the provider) takes no `dimensions` / no such
    # request field (user, input_type, task).
    UNSUPPORTED_DIMENSIONS = "unsupported_dimensions"
    UNSUPPORTED_PARAMETER = "unsupported_parameter"
    UNKNOWN_MODEL = "unknown_model"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    REJECTED = "rejected"  # the provider answered 400/413/422
    # This attempt failed (TransientError).
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    RATE_LIMITED = "rate_limited"
    MALFORMED_RESPONSE = "malformed_response"
    INTERNAL_ERROR = "internal_error"  # an unexpected exception in the embedding backend
    # The Schema Registry cannot answer now (RegistryUnavailable): pause the input, never
    # dead-letter. 401/403 are here too: a credential fix, not the record, makes them pass.
    REGISTRY_UNREACHABLE = "registry_unreachable"  # connection refused / DNS / TLS failure
    REGISTRY_TIMEOUT = "registry_timeout"
    REGISTRY_ERROR = "registry_error"  # 5xx (and 429)
    REGISTRY_AUTH = "registry_auth"  # 401 / 403
    REGISTRY_MALFORMED_RESPONSE = "registry_malformed_response"  # not the Confluent API's JSON
    # The provider refuses everyone (ProviderWideError).
    AUTH = "auth"
    NOT_FOUND = "not_found"
    # A vector store refuses a record (Rejected) or cannot be used (StoreError).
    MODEL_MISMATCH = "model_mismatch"
    DIMENSION_MISMATCH = "dimension_mismatch"
    UNKNOWN_GENERATION = "unknown_generation"  # an index generation the store was not told of
    STORE_LOCKED = "store_locked"  # a lock was not granted in time (a reader holds the view)
    STORE_UNAVAILABLE = "store_unavailable"
    STORE_SCHEMA = "store_schema"  # the table exists but is not one a store of ours can use
    STORE_FAILED = "store_failed"  # the database refused a statement (a bug or a constraint)


def http_reason(status: int) -> str:
    """The reason code of an HTTP status with no reason of its own, e.g. ``http_503``."""
    return f"http_{status}"


# Whole-batch failures one bad input can cause: split the batch to find it.
SPLITTABLE_REASONS = frozenset(
    {Reason.REJECTED, Reason.TIMEOUT, Reason.MALFORMED_RESPONSE, Reason.INTERNAL_ERROR}
)
# Server errors a provider may answer for a whole call because of one input: split only once
# the batch fails a second time, and only while other calls succeed (engine/calls.py): these
# are also outage-like (core/governor.py), and splitting would multiply the calls sent to a
# provider that is down.
SERVER_ERROR_REASONS = frozenset(http_reason(status) for status in (500, 502, 503, 504))


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
        super().__init__(f"setting {setting} ({env_var(setting)}): {problem}")
        self.setting = setting


class UnknownSetting(ConfigError):
    """A name in the environment, the TOML file or the overrides that is no setting."""

    def __init__(self, name: str, problem: str, suggestion: str | None) -> None:
        hint = f"; did you mean {suggestion}?" if suggestion else "; see `embedstream run --help`"
        EmbedStreamError.__init__(self, f"{problem} {name}{hint}")
        self.setting = name
        self.suggestion = suggestion


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


class RequestRefused(PermanentItemError):
    """The provider refused the request rather than an input of it: a model it does not serve
    (404 naming it), a field such as ``dimensions`` or ``encoding_format`` (400 naming it).
    Every input of the call fails alike, so the call is never split to find one; an online
    caller gets ``status`` and the provider's own ``provider_message`` at once, and Kafka work
    of a model the provider does not serve waits for it (``unknown_model``: only that model's)."""

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        status: int,
        provider_message: str,
        param: str | None,
        code: str | None = None,
    ) -> None:
        super().__init__(reason, message)
        self.status = status
        self.provider_message = provider_message
        self.param = param
        self.code = code


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


class RegistryUnavailable(EmbedStreamError):
    """The Schema Registry cannot answer now (refused, timeout, 5xx, 401/403): an outage of the
    input, never a reason to dead-letter the record. Pause and retry; ``/readyz`` says why."""

    retriable = True

    def __init__(self, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.reason = reason


class StoreError(EmbedStreamError):
    """The vector store cannot be used: unreachable (retriable) or its table disagrees with the
    settings (model, dimensions, shape: not retriable). Messages never hold the DSN's password."""

    def __init__(self, reason: str, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.retriable = retriable


class BrokerUnavailable(EmbedStreamError):
    """Kafka cannot be reached at start-up."""

    reason = "broker_unavailable"
