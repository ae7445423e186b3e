"""Admission of one event: parse, validate, apply provider limits, cut documents. Pure.

JSON values come in as bytes (:meth:`Intake.admit`); registry records come in decoded, as the
JSON-equivalent dict their field mapping gives (:meth:`Intake.admit_object`), and from there on
are checked exactly alike.

Everything that can be decided from the record alone is decided here, before the item takes
any buffer space, so poison input is parked in the dead-letter topic at once with a reason. A
request becomes one item; a document becomes its chunks (each checked like a request); a keyed
record without a value is a document's tombstone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

from embedstream.core import configured
from embedstream.core.chunker import Chunk, ChunkingRules, chunk_document
from embedstream.core.document_versions import default_version
from embedstream.core.generations import IndexGeneration
from embedstream.core.limits import ProviderLimits, check_item
from embedstream.core.tokens import TokenCounter
from embedstream.errors import ConfigError, InvalidEvent, Reason
from embedstream.settings import Settings
from embedstream.wire import MAX_ID_CHARS, EmbedRequest, event_object, request_from_doc
from embedstream.wire.document_events import (
    DocumentEvent,
    DocumentTombstone,
    document_from_doc,
    is_document,
    tombstone_for,
)


class Admitted(NamedTuple):
    """A request admitted (a NamedTuple rather than a frozen dataclass: one per record)."""

    request: EmbedRequest
    model: str
    encoding_format: str
    tokens: int
    truncated_from: int | None = None  # the estimate before truncation, when truncated


@dataclass(frozen=True, slots=True)
class AdmittedDocument:
    event: DocumentEvent
    version: str  # the event's, or the digest of its text
    model: str
    encoding_format: str
    chunks: list[Chunk]  # may be empty (an empty text): the document is complete at once


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
        self._chunking = chunking_rules(settings, limits)
        self._dimensions = settings.dimensions
        self._max_value_bytes = max(settings.max_event_bytes, settings.max_document_bytes)
        self._max_event_bytes = settings.max_event_bytes
        self._model = settings.model
        self._encoding_format = settings.encoding_format
        self._max_tokens = limits.max_tokens_per_input
        # Whether a request of only an id and a text may take the short path of admit_object:
        # nothing of the settings changes it (a default dimensions would) or refuses it.
        self._plain_ok = (
            self._dimensions is None
            and (not self._allowed_models or self._model in self._allowed_models)
            and self._encoding_format in limits.encoding_formats
        )
        if self._dimensions is not None and not limits.dimensions:
            raise ConfigError(
                "dimensions", f"provider_profile {self._profile} takes no dimensions; unset it"
            )

    def admit(
        self, value: bytes | None, key: bytes | None = None
    ) -> Admitted | AdmittedDocument | DocumentTombstone | Rejected:
        try:
            if value is None:
                return tombstone_for(key)
            doc = event_object(value, max_bytes=self._max_value_bytes)
        except InvalidEvent as exc:
            return Rejected("InvalidEvent", exc.reason, exc.message)
        return self.admit_object(doc, len(value))

    def admit_object(
        self, doc: dict[str, Any], size: int
    ) -> Admitted | AdmittedDocument | Rejected:
        """One event already decoded into its JSON-equivalent dict (a JSON event, or a registry
        record after field mapping); ``size`` is the record value's length in bytes."""
        if len(doc) == 2 and self._plain_ok and size <= self._max_event_bytes:
            # The usual request, an id and a text within every limit, checked here without
            # the general path's calls (test_fuzz_intake holds both to the same verdicts).
            rid, text = doc.get("id"), doc.get("text")
            if (
                type(rid) is str and 0 < len(rid) <= MAX_ID_CHARS
                and type(text) is str and text and not text.isspace()
            ):  # fmt: skip
                tokens = self._count(text)
                if tokens <= self._max_tokens:  # (Admitted, EmbedRequest without their __new__)
                    request = _tuple_new(EmbedRequest, (rid, text, *_NO_OPTIONAL_FIELDS))
                    admitted = (request, self._model, self._encoding_format, tokens, None)
                    return _tuple_new(Admitted, admitted)
        return self._admit_general(doc, size)

    def _admit_general(
        self, doc: dict[str, Any], size: int
    ) -> Admitted | AdmittedDocument | Rejected:
        s = self._settings
        try:
            if is_document(doc):
                if size > s.max_document_bytes:
                    limit = f"limit {s.max_document_bytes} (max_document_bytes)"
                    raise InvalidEvent(Reason.OVERSIZED, f"document is {size} bytes, {limit}")
                return self._admit_document(document_from_doc(doc))
            if size > self._max_event_bytes:
                raise InvalidEvent(
                    Reason.OVERSIZED, f"value is {size} bytes, limit {s.max_event_bytes}"
                )
            request = request_from_doc(doc)
        except InvalidEvent as exc:
            return Rejected("InvalidEvent", exc.reason, exc.message)
        if request.dimensions is None and self._dimensions is not None:
            request = request._replace(dimensions=self._dimensions)
        model = request.model or self._model
        if self._allowed_models and model not in self._allowed_models:
            return Rejected(
                "PermanentItemError", Reason.UNKNOWN_MODEL, f"model {model!r} not allowed"
            )
        encoding_format = request.encoding_format or self._encoding_format
        tokens = self._count(request.text)
        limits = self._limits
        if (
            tokens <= limits.max_tokens_per_input
            and encoding_format in limits.encoding_formats
            and request.dimensions is None
            and request.user is None
            and request.input_type is None
            and request.task is None
        ):  # fmt: skip
            # Most requests: check_item has nothing to refuse (a blank text was refused as
            # invalid above), so it is not asked. (Admitted(request, model, encoding_format,
            # tokens), without the call of its generated __new__.)
            return _tuple_new(Admitted, (request, model, encoding_format, tokens, None))
        problem = check_item(
            limits,
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
            shorter = request._replace(text=text)
            return Admitted(shorter, model, encoding_format, self._count(text), tokens)
        return Rejected("PermanentItemError", problem.reason, problem.message)

    def admit_document(self, event: DocumentEvent) -> AdmittedDocument | Rejected:
        """One document event already parsed (the same event again, for another index
        generation: `core/migration.py`)."""
        return self._admit_document(event)

    def _admit_document(self, event: DocumentEvent) -> AdmittedDocument | Rejected:
        if event.dimensions is None and self._dimensions is not None:
            event = dataclasses.replace(event, dimensions=self._dimensions)
        model = event.model or self._settings.model
        if self._allowed_models and model not in self._allowed_models:
            return Rejected(
                "PermanentItemError", Reason.UNKNOWN_MODEL, f"model {model!r} not allowed"
            )
        encoding_format = event.encoding_format or self._settings.encoding_format
        chunks = chunk_document(event.text, self._chunking, self._count)
        most = self._settings.max_document_chunks
        if len(chunks) > most:
            return Rejected("PermanentItemError", Reason.TOO_MANY_CHUNKS,
                            f"document cuts into {len(chunks)} chunks, limit {most} "
                            "(max_document_chunks)")  # fmt: skip
        for chunk in chunks:  # a few comparisons each; the first problem refuses the document
            problem = check_item(
                self._limits,
                text=chunk.text,
                tokens=chunk.tokens,
                encoding_format=encoding_format,
                dimensions=event.dimensions,
                parameters=event.parameters(),
                profile_name=self._profile,
            )
            if problem is not None:
                return Rejected("PermanentItemError", problem.reason, problem.message)
        version = event.version or default_version(event.text)
        return AdmittedDocument(event, version, model, encoding_format, chunks)


_tuple_new = tuple.__new__
_NO_OPTIONAL_FIELDS = (None,) * 8  # EmbedRequest's fields after id and text


def settings_of(settings: Settings, generation: IndexGeneration) -> Settings:
    """``settings`` as a processor of ``generation`` has them: its model, the dimensions it
    asks for and its chunk settings."""
    rules = generation.chunking
    return dataclasses.replace(
        settings, model=generation.model, dimensions=generation.dimensions,
        chunk_max_tokens=rules.max_tokens, chunk_overlap_tokens=rules.overlap_tokens,
        chunk_min_tokens=rules.min_tokens,
    )  # fmt: skip


def chunking_rules(settings: Settings, limits: ProviderLimits) -> ChunkingRules:
    """The chunk settings, capped so that every chunk is one input the provider takes."""
    most = min(settings.chunk_max_tokens, limits.max_tokens_per_input)
    overlap = min(settings.chunk_overlap_tokens, most // 4)
    return ChunkingRules(most, overlap, min(settings.chunk_min_tokens, most))


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
