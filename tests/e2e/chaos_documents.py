"""Documents for chaos tests: a deterministic plan of events, a feeder that publishes it, and the
check of what every planned version must have ended as.

The plan holds several versions of the same doc_ids (each a random number of paragraphs, so a
document grows and shrinks between versions), a few tombstones (some documents come back after
them), poison paragraphs that the simulator rejects for good, and plain requests among them.
Each doc_id stays on one request topic, so its events keep their order end to end. The check is
independent of `embedstream verify`: it knows what was sent, so it can say which versions must end
``complete`` and which ``incomplete`` with exactly which chunks missing, and it checks each chunk's
vector against its own span of its own version's text.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from embedsim.vectors import expected_vector
from embedstream.core.chunker import ChunkingRules, chunk_document
from embedstream.core.document_versions import default_version
from embedstream.wire.result_records import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    DocumentRecord,
)

from tests.e2e.chaos_feed import Feeder

# Each paragraph (about 80 bytes, under 40 estimated tokens) is a chunk of its own, so a
# version's chunk count follows its paragraph count and one poison paragraph is one chunk.
CHUNKING = ChunkingRules(max_tokens=40, overlap_tokens=0, min_tokens=0)
CHUNK_ARGS = (
    "--chunk-max-tokens", str(CHUNKING.max_tokens),
    "--chunk-overlap-tokens", str(CHUNKING.overlap_tokens),
    "--chunk-min-tokens", str(CHUNKING.min_tokens),
)  # fmt: skip
POISON = "POISON"  # the simulator is started with reject_texts_containing=POISON
_LISTED = 10
_WORDS = ("kafka", "partition", "offset", "commit", "broker", "leader", "replica", "consumer",
          "rebalance", "vector")  # fmt: skip


@dataclass(frozen=True)
class PlannedEvent:
    """One record to publish: a document version, a tombstone (``text`` None with a doc_id),
    or a plain request (``doc_id`` None)."""

    key: str
    high: bool
    doc_id: str | None = None
    text: str | None = None
    version: str | None = None  # as the processor will see it: named, or the text's digest
    named_version: bool = True  # False: the event leaves version out (the digest applies)
    metadata: Mapping[str, Any] | None = None

    @property
    def is_tombstone(self) -> bool:
        return self.doc_id is not None and self.text is None

    def value(self) -> bytes | None:
        if self.is_tombstone:
            return None
        if self.doc_id is None:
            return orjson.dumps({"id": self.key, "text": self.text})
        doc: dict[str, Any] = {"doc_id": self.doc_id, "text": self.text, "metadata": self.metadata}
        if self.named_version:
            doc["version"] = self.version
        return orjson.dumps(doc)


@dataclass(frozen=True)
class Expected:
    """How one planned version must end."""

    chunk_count: int
    missing: tuple[int, ...]  # the seqs of the chunks holding poison: () means complete
    text: str
    metadata: Mapping[str, Any] | None


@dataclass(frozen=True)
class DocumentPlan:
    events: tuple[PlannedEvent, ...]

    @classmethod
    def build(
        cls,
        *,
        documents: int,
        rounds: int,
        seed: int,
        max_paragraphs: int = 6,
        poison_chance: float = 0.02,
        delete_chance: float = 0.06,
        plain_every: int = 8,
        rapid_chance: float = 0.3,
    ) -> DocumentPlan:
        """`rounds` passes over `documents` doc_ids in a shuffled order, each giving a doc a new
        version of 0..max_paragraphs paragraphs (0: an empty text, complete with 0 chunks) or
        a tombstone (`rapid_chance`: two of them back to back); a plain request after every
        `plain_every` events."""
        rng = random.Random(seed)
        events: list[PlannedEvent] = []
        doc_ids = [f"doc{d:03d}" for d in range(documents)]
        versions = dict.fromkeys(doc_ids, 0)
        for _ in range(rounds):
            order = doc_ids[:]
            rng.shuffle(order)
            for doc_id in order:
                # Some edits come in quick succession (a version, then at once another or a
                # delete), so a replay after a crash can start before a version already ended.
                for _ in range(2 if rng.random() < rapid_chance else 1):
                    index = len(events)
                    high = int(doc_id[3:]) % 4 == 0
                    if versions[doc_id] and rng.random() < delete_chance:
                        events.append(PlannedEvent(doc_id, high, doc_id=doc_id))
                    else:
                        versions[doc_id] += 1
                        text = _document_text(rng, doc_id, index, max_paragraphs, poison_chance)
                        named = versions[doc_id] % 3 != 0  # every third leaves version out
                        version = str(versions[doc_id]) if named else default_version(text)
                        events.append(
                            PlannedEvent(
                                doc_id, high, doc_id=doc_id, text=text, version=version,
                                named_version=named, metadata={"event": index},
                            )
                        )  # fmt: skip
                    if len(events) % plain_every == 0:
                        rid = f"plain{len(events):05d}"
                        text = f"{rid}: " + " ".join(rng.choices(_WORDS, k=8))
                        events.append(PlannedEvent(rid, len(events) % 2 == 0, text=text))
        return cls(tuple(events))

    def expected(self) -> dict[tuple[str, str], Expected]:
        """Every planned version, by (doc_id, version), and how it must end."""
        found: dict[tuple[str, str], Expected] = {}
        for event in self.events:
            if event.doc_id is None or event.text is None or event.version is None:
                continue
            chunks = chunk_document(event.text, CHUNKING)
            missing = tuple(c.seq for c in chunks if POISON in c.text)
            found[event.doc_id, event.version] = Expected(
                len(chunks), missing, event.text, event.metadata
            )
        return found

    @property
    def versions(self) -> int:
        return sum(1 for e in self.events if e.doc_id is not None and not e.is_tombstone)

    @property
    def tombstones(self) -> int:
        return sum(1 for e in self.events if e.is_tombstone)

    @property
    def poisoned(self) -> int:
        return sum(1 for e in self.expected().values() if e.missing)

    @property
    def chunks(self) -> int:
        return sum(e.chunk_count for e in self.expected().values())

    @property
    def good_chunks(self) -> int:
        """Chunks that must get a result: all but the poison ones."""
        return sum(e.chunk_count - len(e.missing) for e in self.expected().values())


def _document_text(
    rng: random.Random, doc_id: str, index: int, max_paragraphs: int, poison_chance: float
) -> str:
    paragraphs = []
    for p in range(rng.randint(0, max_paragraphs)):
        words = rng.choices(_WORDS, k=8)
        if rng.random() < poison_chance:
            words[rng.randrange(len(words))] = POISON
        paragraphs.append(f"{doc_id} e{index:04d} p{p}: " + " ".join(words))
    return "\n\n".join(paragraphs)


class DocumentFeeder(Feeder):
    """Publishes a :class:`DocumentPlan` in order at `rate_per_s`, keyed by doc_id (or request
    id), as :class:`Feeder` publishes requests (acks=all, failed sends sent again)."""

    def __init__(self, bootstrap: str, prefix: str, plan: DocumentPlan, *, rate_per_s: float):
        super().__init__(bootstrap, prefix, count=len(plan.events), rate_per_s=rate_per_s)
        self.plan = plan
        self.ids = [event.key for event in plan.events]

    def _is_high(self, index: int) -> bool:
        return self.plan.events[index].high

    def record(self, index: int) -> tuple[str, bytes, bytes | None]:
        event = self.plan.events[index]
        topic = self._high_topic if event.high else self._low_topic
        return topic, event.key.encode(), event.value()


@dataclass(frozen=True)
class EndingCheck:
    """What the results topic says of the plan's versions (each counted once)."""

    complete: int
    incomplete: int
    deleted_docs: int
    problems: tuple[str, ...]


def check_endings(
    plan: DocumentPlan, records: Iterable[DocumentRecord], *, model: str
) -> EndingCheck:
    """Every planned version has at least one final record, and every final record of it is
    the one the plan calls for (complete with its chunk count, or incomplete naming exactly its
    poison chunks); every chunk record belongs to a planned version, carries that version's
    chunk count and metadata, and holds the simulator's vector for its span of that text; every
    doc_id with a planned tombstone has a tombstone out."""
    expected = plan.expected()
    problems: list[str] = []
    ended: dict[tuple[str, str], set[str]] = defaultdict(set)
    deleted: set[str] = set()
    for record in records:
        if isinstance(record, DocumentDeleted):
            deleted.add(record.doc_id)
            continue
        name = (record.doc_id, record.version)
        want = expected.get(name)
        if want is None:
            problems.append(f"{record.doc_id}@{record.version}: a version never planned")
            continue
        if isinstance(record, ChunkResult):
            problems.extend(_chunk_problems(record, want, model))
        elif isinstance(record, DocumentComplete):
            ended[name].add("complete")
            if want.missing or record.chunk_count != want.chunk_count:
                problems.append(f"{name}: complete/{record.chunk_count}, expected {want}")
        else:
            assert isinstance(record, DocumentIncomplete)
            ended[name].add("incomplete")
            if record.missing != want.missing or record.chunk_count != want.chunk_count:
                problems.append(
                    f"{name}: incomplete/{record.chunk_count} missing {record.missing}, "
                    f"expected {want.chunk_count} missing {want.missing}"
                )
    never = sorted(set(expected) - set(ended))
    if never:
        problems.append(f"{len(never)} versions never ended: {never[:_LISTED]}")
    undeleted = sorted({e.key for e in plan.events if e.is_tombstone} - deleted)
    if undeleted:
        problems.append(f"tombstones never out: {undeleted[:_LISTED]}")
    return EndingCheck(
        complete=sum("complete" in kinds for kinds in ended.values()),
        incomplete=sum("incomplete" in kinds for kinds in ended.values()),
        deleted_docs=len(deleted),
        problems=tuple(problems),
    )


def _chunk_problems(chunk: ChunkResult, want: Expected, model: str) -> list[str]:
    name = f"{chunk.doc_id}@{chunk.version}#{chunk.chunk_seq}"
    if chunk.chunk_count != want.chunk_count or chunk.chunk_seq in want.missing:
        return [f"{name}: chunk of {chunk.chunk_count}, expected {want.chunk_count} "
                f"without {want.missing}"]  # fmt: skip
    if chunk.metadata != want.metadata:
        return [f"{name}: metadata {chunk.metadata}, expected {want.metadata}"]
    start, end = chunk.span
    vector = expected_vector(model, want.text[start:end], len(chunk.embedding))
    got = [float(x) for x in chunk.embedding]  # decoded records hold a float list
    if max(abs(a - b) for a, b in zip(got, vector, strict=True)) > 1e-6:
        return [f"{name}: the vector is not the one of its span {chunk.span}"]
    return []
