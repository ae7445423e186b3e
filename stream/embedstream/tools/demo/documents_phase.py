"""The demo's documents phase as a pure model: what to publish, and what the topics say it did.

No I/O here. :func:`document_plan` makes a few dozen multi-paragraph documents (version 1),
then the edit pass: one paragraph changed in some of them (version 2) and one document deleted.
The shell (:mod:`embedstream.tools.demo.app`) publishes them keyed by doc_id and waits until
the processor's registry counts an ending (``embedstream_documents_total``) for each event;
:func:`document_figures` then counts, from the document records read back, the chunks and the
tokens the provider was paid for in each pass (a chunk the cache answered costs none), and
takes complete/incomplete/deleted and the contract check from the verify report of documents.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from embedstream.tools.demo.texts import WORDS
from embedstream.tools.verify.document_checks import DocumentReport
from embedstream.wire.result_records import ChunkResult, DocumentRecord

FIRST, EDITED = "1", "2"  # the versions of the two passes
EDIT_EVERY = 6  # one document in six gets one paragraph edited


@dataclass(frozen=True, slots=True)
class DocumentEvent:
    """A document version to publish, or a delete (``text`` None)."""

    doc_id: str
    text: str | None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class DocumentPlan:
    first: tuple[DocumentEvent, ...]  # every document, version 1
    edits: tuple[DocumentEvent, ...]  # the edited versions, then the delete

    @property
    def edited(self) -> int:
        return sum(1 for e in self.edits if e.text is not None)

    @property
    def deleted(self) -> int:
        return sum(1 for e in self.edits if e.text is None)


def document_plan(documents: int, seed: int = 18) -> DocumentPlan:
    """`documents` texts of 4 to 8 paragraphs (40 to 120 words each, so a few chunks each);
    the edit pass changes one paragraph of every EDIT_EVERY-th and deletes the last one."""
    if documents < 2:
        raise ValueError(f"documents must be at least 2, got {documents}")
    rng = random.Random(seed)
    paragraphs = {
        f"doc-{n:03d}": [_paragraph(rng) for _ in range(rng.randint(4, 8))]
        for n in range(documents)
    }
    first = tuple(DocumentEvent(d, "\n\n".join(p), FIRST) for d, p in paragraphs.items())
    edits: list[DocumentEvent] = []
    for n, (doc_id, parts) in enumerate(paragraphs.items()):
        if n % EDIT_EVERY == 0 and n < documents - 1:
            changed = list(parts)
            changed[rng.randrange(len(changed))] = _paragraph(rng)
            edits.append(DocumentEvent(doc_id, "\n\n".join(changed), EDITED))
    edits.append(DocumentEvent(first[-1].doc_id, None))
    return DocumentPlan(first, tuple(edits))


def _paragraph(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120))) + "."


@dataclass(frozen=True, slots=True)
class PassFigures:
    """One pass as the results topic shows it (each chunk counted once)."""

    chunks: int
    cached: int  # chunks the embedding cache answered
    tokens_sent: int  # tokens of the chunks the provider embedded


@dataclass(frozen=True, slots=True)
class DocumentFigures:
    plan: DocumentPlan
    first: PassFigures
    edit: PassFigures
    report: DocumentReport  # the verify check of every document record
    seconds: float  # first document published to the last ending counted

    @property
    def edit_share(self) -> float | None:
        """Tokens the edit pass sent, as a share of the first pass's; None if it sent none."""
        return self.edit.tokens_sent / self.first.tokens_sent if self.first.tokens_sent else None


def pass_figures(records: Iterable[DocumentRecord], version: str) -> PassFigures:
    seen: dict[tuple[str, int], ChunkResult] = {}
    for record in records:
        if isinstance(record, ChunkResult) and record.version == version:
            seen.setdefault((record.doc_id, record.chunk_seq), record)
    chunks = seen.values()
    return PassFigures(
        chunks=len(chunks),
        cached=sum(c.cached for c in chunks),
        tokens_sent=sum(c.tokens for c in chunks if not c.cached),
    )


def document_figures(
    plan: DocumentPlan, records: Iterable[DocumentRecord], report: DocumentReport, seconds: float
) -> DocumentFigures:
    kept = list(records)
    return DocumentFigures(
        plan, pass_figures(kept, FIRST), pass_figures(kept, EDITED), report, seconds
    )


def documents_ok(figures: DocumentFigures) -> bool:
    """Every version ended complete, the delete came out, the contract held, nothing twice."""
    r, p = figures.report, figures.plan
    versions = len(p.first) + p.edited
    return (
        r.ok
        and not r.duplicates
        and (r.complete, r.incomplete, r.deleted) == (versions, 0, p.deleted)
    )


def documents_lines(figures: DocumentFigures, *, cache_on: bool) -> Group:
    """A table of the two passes (chunks, cache answers, tokens sent), then the endings as the
    verify check of documents counted them."""
    p, r = figures.plan, figures.report
    # The title goes above the table, not in it: a table title wraps at the table's width.
    heading = Text(
        f"documents: {len(p.first)}, then {p.edited} edited (a paragraph each) and "
        f"{p.deleted} deleted, in {figures.seconds:.1f} s",
        no_wrap=True,
    )
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column("pass")
    for title in ("documents", "chunks", "from cache", "tokens sent", "of 1st pass"):
        table.add_column(title, justify="right")
    share = figures.edit_share
    for name, count, figures_of, of_first in (
        ("first", len(p.first), figures.first, "100%"),
        ("edit", p.edited, figures.edit, "-" if share is None else f"{share:.1%}"),
    ):
        table.add_row(
            name, f"{count:,}", f"{figures_of.chunks:,}", f"{figures_of.cached:,}",
            f"{figures_of.tokens_sent:,}", of_first,
        )  # fmt: skip
    text = Text()
    if not cache_on:
        text.append("cache off: every chunk of an edited document is embedded again\n")
    text.append(
        f"read back: {r.complete} complete, {r.incomplete} incomplete, {r.deleted} deleted; "
        f"lost {len(r.lost)}, twice {r.duplicates}, breaches {len(r.violations)}"
    )
    if documents_ok(figures):
        text.append("\nevery version ended complete and the delete came out", style="green")
    else:
        text.append("\nnot every document ended as the contract says", style="bold red")
    return Group(heading, table, Text(), text)
