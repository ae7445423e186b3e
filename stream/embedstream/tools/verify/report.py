"""Pure core of `embedstream verify`: requests and outcomes in, a delivery report out.

No asyncio, no Kafka: the caller reads the topics (see :mod:`embedstream.tools.verify.app`) and
hands over what it found. Everything here is deterministic, so the verdict can be unit-tested
exhaustively.

Definitions (all id lists are sorted):

- ``lost``: requested ids with neither a result nor a dead letter.
- ``duplicates``: ids with more than one result record, with their result counts.
- ``misattributed``: requested ids with a result whose vector is not the expected vector of that
  id's text (only when an ``expected`` function is given).
- ``in_both``: ids with a result and a dead letter.
- ``unknown_results`` / ``unknown_dead_letters``: outcomes for ids never requested.
- ``unparseable_lost``: request records without a usable id (not JSON, no string id) that no
  dead letter accounts for, as ``topic:partition:offset``.

The report is ``ok`` when nothing is lost, misattributed or in both, and the duplicate result
records (every result of an id beyond its first), with the documents' duplicate records,
number at most ``max_duplicates``; documents (:mod:`embedstream.tools.verify.document_checks`), when
checked, must keep their output contract.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from embedstream.tools.verify.document_checks import DocumentReport
from embedstream.wire.vectors import decode_base64

# (model, text, dimensions) -> the vector a correct pipeline returns, e.g. the simulator's
# embedsim.model.expected_vector.
ExpectedVector = Callable[[str, str, int], list[float]]

DEFAULT_TOLERANCE = 1e-6
SOURCE_TOPIC = "embedstream.source.topic"
SOURCE_PARTITION = "embedstream.source.partition"
SOURCE_OFFSET = "embedstream.source.offset"
_LISTED = 20  # ids shown per category in summary()


class RequestInfo(NamedTuple):
    """What a request asked for. ``text`` is None when the request carried no string text."""

    text: str | None
    model: str | None
    dimensions: int | None
    topic: str


class ResultRecord(NamedTuple):
    """One result record: its id and parsed JSON document. ``truncated`` results were computed
    on a shortened text (header ``embedstream.truncated_from_tokens``), so their vector is not
    checked."""

    id: str
    doc: Mapping[str, Any]
    truncated: bool = False


class DeadLetter(NamedTuple):
    """One dead letter: the id of the original request (None when it has none) and its headers
    as strings (``embedstream.source.topic|partition|offset`` locate the original record)."""

    id: str | None
    headers: Mapping[str, str]


class Location(NamedTuple):
    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"


@dataclass(frozen=True)
class VerificationReport:
    requests: int  # distinct requested ids
    results: int  # result records
    dead_letters: int  # dead-letter records
    lost: tuple[str, ...]
    duplicates: Mapping[str, int]  # id -> number of results, for ids with more than one
    misattributed: tuple[str, ...]
    in_both: tuple[str, ...]
    unknown_results: tuple[str, ...]
    max_duplicates: int = 0
    unknown_dead_letters: tuple[str, ...] = ()
    unparseable_requests: int = 0
    unparseable_lost: tuple[str, ...] = ()
    unparseable_results: int = 0
    repeated_requests: Mapping[str, int] = field(default_factory=dict)
    mismatches: Mapping[str, str] = field(default_factory=dict)  # misattributed id -> why
    vectors_checked: bool = False
    vectors_compared: int = 0
    vectors_skipped: int = 0  # truncated results or requests without a text
    documents: DocumentReport | None = None  # None: nothing of documents was checked

    @property
    def duplicate_results(self) -> int:
        """Result records beyond the first of their id."""
        return sum(count - 1 for count in self.duplicates.values())

    @property
    def ok(self) -> bool:
        documents = self.documents or DocumentReport()
        return documents.ok and not (
            self.lost
            or self.misattributed
            or self.in_both
            or self.unparseable_lost
            or self.duplicate_results + documents.duplicates > self.max_duplicates
        )

    def summary(self) -> str:
        lines = [f"embedstream verify: {'OK' if self.ok else 'FAILED'}"]

        def row(label: str, text: str) -> None:
            lines.append(f"  {label:<16}{text}")

        requested = f"{self.requests} distinct ids"
        if self.repeated_requests:
            requested += f" ({len(self.repeated_requests)} requested more than once)"
        if self.unparseable_requests:
            requested += (
                f", {self.unparseable_requests} without a usable id"
                f" ({len(self.unparseable_lost)} not dead-lettered)"
            )
        row("requests", requested)
        results = f"{self.results} records"
        if self.unparseable_results:
            results += f", {self.unparseable_results} unreadable"
        row("results", results)
        row("dead letters", f"{self.dead_letters} records")
        row("lost", str(len(self.lost)))
        row(
            "duplicates",
            f"{len(self.duplicates)} ids, {self.duplicate_results} extra results"
            f" (allowed {self.max_duplicates})",
        )
        if self.vectors_checked:
            checked = f"{len(self.misattributed)} ({self.vectors_compared} vectors compared"
            checked += f", {self.vectors_skipped} skipped)" if self.vectors_skipped else ")"
        else:
            checked = "not checked (--check-vectors)"
        row("misattributed", checked)
        row("in both", str(len(self.in_both)))
        row(
            "unknown",
            f"{len(self.unknown_results)} results, "
            f"{len(self.unknown_dead_letters)} dead letters for ids never requested",
        )

        def listing(title: str, items: Sequence[str]) -> None:
            if items:
                shown = ", ".join(items[:_LISTED])
                more = f" ... and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
                lines.append(f"{title}: {shown}{more}")

        listing("lost", self.lost)
        listing("duplicates", [f"{i} x{n}" for i, n in self.duplicates.items()])
        listing(
            "misattributed", [f"{i} ({self.mismatches.get(i, '?')})" for i in self.misattributed]
        )
        listing("in both", self.in_both)
        listing("unparseable requests not dead-lettered", self.unparseable_lost)
        listing("unknown results", self.unknown_results)
        if self.documents is not None:
            lines.extend(self.documents.summary_lines())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "requests": self.requests,
            "results": self.results,
            "dead_letters": self.dead_letters,
            "lost": list(self.lost),
            "duplicates": dict(self.duplicates),
            "duplicate_results": self.duplicate_results,
            "max_duplicates": self.max_duplicates,
            "misattributed": list(self.misattributed),
            "mismatches": dict(self.mismatches),
            "in_both": list(self.in_both),
            "unknown_results": list(self.unknown_results),
            "unknown_dead_letters": list(self.unknown_dead_letters),
            "unparseable_requests": self.unparseable_requests,
            "unparseable_lost": list(self.unparseable_lost),
            "unparseable_results": self.unparseable_results,
            "repeated_requests": dict(self.repeated_requests),
            "vectors_checked": self.vectors_checked,
            "vectors_compared": self.vectors_compared,
            "vectors_skipped": self.vectors_skipped,
            "documents": None if self.documents is None else self.documents.to_json(),
        }


def build_report(
    requests: Mapping[str, RequestInfo | tuple[str | None, str | None, int | None, str]],
    results: Iterable[ResultRecord | tuple[str, Mapping[str, Any]]],
    dead_letters: Iterable[DeadLetter | tuple[str | None, Mapping[str, str]]],
    *,
    expected: ExpectedVector | None = None,
    default_model: str | None = None,
    max_duplicates: int = 0,
    tolerance: float = DEFAULT_TOLERANCE,
    unparseable_requests: Sequence[Location] = (),
    unparseable_results: int = 0,
    repeated_requests: Mapping[str, int] | None = None,
    documents: DocumentReport | None = None,
) -> VerificationReport:
    """Compare requests with their outcomes (``documents``: the documents' own check, folded
    into the verdict).

    ``expected`` enables the vector check; the model is the request's, else ``default_model``,
    else the result's own ``model`` field, and the dimensions are the request's, else the
    length of the returned vector. ``unparseable_requests`` locates request records without a
    usable id: each is accounted for by a dead letter whose source headers name it, failing
    that by a dead letter without an id or source headers; the rest are ``unparseable_lost``.
    """
    if max_duplicates < 0:
        raise ValueError(f"max_duplicates must be >= 0, got {max_duplicates}")
    infos = {rid: RequestInfo(*info) for rid, info in requests.items()}
    records = [ResultRecord(*record) for record in results]
    letters = [DeadLetter(*letter) for letter in dead_letters]

    result_counts = Counter(record.id for record in records)
    dead_ids = {letter.id for letter in letters if letter.id is not None}
    resulted = set(result_counts)

    mismatches: dict[str, str] = {}
    compared = skipped = 0
    if expected is not None:
        for record in records:
            info = infos.get(record.id)
            if info is None or record.id in mismatches:
                continue
            if record.truncated or info.text is None:
                skipped += 1
                continue
            problem = _vector_problem(record.doc, info, expected, default_model, tolerance)
            compared += 1
            if problem is not None:
                mismatches[record.id] = problem

    return VerificationReport(
        requests=len(infos),
        results=len(records),
        dead_letters=len(letters),
        lost=tuple(sorted(set(infos) - resulted - dead_ids)),
        duplicates={rid: n for rid, n in sorted(result_counts.items()) if n > 1},
        misattributed=tuple(sorted(mismatches)),
        in_both=tuple(sorted(resulted & dead_ids)),
        unknown_results=tuple(sorted(resulted - set(infos))),
        max_duplicates=max_duplicates,
        unknown_dead_letters=tuple(sorted(dead_ids - set(infos))),
        unparseable_requests=len(unparseable_requests),
        unparseable_lost=tuple(
            str(location) for location in _unaccounted(unparseable_requests, letters)
        ),
        unparseable_results=unparseable_results,
        repeated_requests=dict(sorted((repeated_requests or {}).items())),
        mismatches=dict(sorted(mismatches.items())),
        vectors_checked=expected is not None,
        vectors_compared=compared,
        vectors_skipped=skipped,
        documents=documents,
    )


def _unaccounted(unparseable: Sequence[Location], letters: Sequence[DeadLetter]) -> list[Location]:
    located: set[Location] = set()
    anonymous = 0  # dead letters without an id or a readable source: may stand for any
    for letter in letters:
        location = source_location(letter.headers)
        if location is not None:
            located.add(location)
        elif letter.id is None:
            anonymous += 1
    missing = []
    for location in sorted(unparseable):
        if location in located:
            continue
        if anonymous:
            anonymous -= 1
            continue
        missing.append(location)
    return missing


def source_location(headers: Mapping[str, str]) -> Location | None:
    """Where a dead letter's original record was, from its ``embedstream.source.*`` headers."""
    topic = headers.get(SOURCE_TOPIC)
    try:
        partition = int(headers.get(SOURCE_PARTITION, ""))
        offset = int(headers.get(SOURCE_OFFSET, ""))
    except ValueError:
        return None
    return Location(topic, partition, offset) if topic else None


def _vector_problem(
    doc: Mapping[str, Any],
    info: RequestInfo,
    expected: ExpectedVector,
    default_model: str | None,
    tolerance: float,
) -> str | None:
    """Why this result's vector is wrong for the request, or None when it is right."""
    assert info.text is not None
    try:
        vector = decode_embedding(doc.get("embedding"))
    except ValueError as exc:
        return f"unreadable embedding: {exc}"
    if not vector:
        return "empty embedding"
    result_model = doc.get("model")
    model = info.model or default_model or (result_model if isinstance(result_model, str) else "")
    if not model:
        return "no model to compute the expected vector with"
    dimensions = info.dimensions or len(vector)
    if len(vector) != dimensions:
        return f"{len(vector)} components, requested {dimensions}"
    try:
        want = expected(model, info.text, dimensions)
    except ValueError as exc:
        return f"no expected vector: {exc}"
    if len(want) != len(vector):
        return f"{len(vector)} components, expected {len(want)}"
    for index, (got, good) in enumerate(zip(vector, want, strict=True)):
        if not math.isclose(got, good, rel_tol=tolerance, abs_tol=tolerance):
            return f"component {index} is {got!r}, expected {good!r}"
    return None


def decode_embedding(value: object) -> list[float]:
    """A result's ``embedding``: a list of numbers, or base64 of little-endian float32."""
    if isinstance(value, str):
        return decode_base64(value)
    if isinstance(value, list):
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
            raise ValueError("a component is not a number")
        return [float(x) for x in value]
    raise ValueError(f"expected a list or a base64 string, got {type(value).__name__}")
