"""The demo's documents phase (pure): the plan, the passes' figures from document records, the
verdict and the table."""

from __future__ import annotations

import io

import pytest
from embedstream.tools.demo.documents_phase import (
    EDITED,
    FIRST,
    document_figures,
    document_plan,
    documents_lines,
    documents_ok,
    pass_figures,
)
from embedstream.tools.verify.document_checks import DocumentReport
from embedstream.wire.result_records import ChunkResult, DocumentComplete, DocumentRecord
from rich.console import Console


def chunk(doc: str, version: str, seq: int, tokens: int, cached: bool = False) -> ChunkResult:
    return ChunkResult(doc, version, seq, 3, (0, 1), [1.0], "m", 1, tokens, cached, None, 1, 1.0)


def text_of(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=80, highlight=False, color_system=None).print(renderable)
    return out.getvalue()


def test_the_plan_edits_one_paragraph_of_some_documents_and_deletes_one() -> None:
    plan = document_plan(36)
    assert len(plan.first) == 36 and all(e.version == FIRST for e in plan.first)
    assert (plan.edited, plan.deleted) == (6, 1)
    assert plan.edits[-1].text is None and plan.edits[-1].doc_id == plan.first[-1].doc_id
    originals = {e.doc_id: e.text for e in plan.first}
    for edit in plan.edits[:-1]:
        assert edit.version == EDITED and edit.text is not None
        before, after = originals[edit.doc_id], edit.text
        assert before is not None
        changed = [a != b for a, b in zip(before.split("\n\n"), after.split("\n\n"), strict=True)]
        assert sum(changed) == 1  # exactly one paragraph differs
    assert document_plan(36) == plan  # deterministic
    with pytest.raises(ValueError, match="at least 2"):
        document_plan(1)


def test_a_pass_counts_each_chunk_once_and_only_tokens_the_provider_embedded() -> None:
    records: list[DocumentRecord] = [
        chunk("a", FIRST, 0, 100), chunk("a", FIRST, 1, 50), chunk("a", FIRST, 1, 50),  # again
        chunk("a", EDITED, 0, 100, cached=True), chunk("a", EDITED, 1, 70),
        DocumentComplete("a", FIRST, 2, None),
    ]  # fmt: skip
    first, edit = pass_figures(records, FIRST), pass_figures(records, EDITED)
    assert (first.chunks, first.cached, first.tokens_sent) == (2, 0, 150)
    assert (edit.chunks, edit.cached, edit.tokens_sent) == (2, 1, 70)
    plan = document_plan(12)
    figures = document_figures(plan, records, DocumentReport(), 1.0)
    assert figures.edit_share == pytest.approx(70 / 150)


@pytest.mark.parametrize(
    ("report", "ok"),
    [
        (DocumentReport(complete=38, deleted=1), True),  # 36 + 2 edited ended, one delete
        (DocumentReport(complete=37, incomplete=1, deleted=1), False),
        (DocumentReport(complete=38, deleted=0), False),
        (DocumentReport(complete=38, deleted=1, duplicates=1), False),
        (DocumentReport(complete=38, deleted=1, lost=("doc-001@2",)), False),
    ],
)
def test_ok_means_every_version_complete_once_and_the_delete_out(
    report: DocumentReport, ok: bool
) -> None:
    plan = document_plan(12)  # 12 documents, 2 edited, 1 deleted
    assert (len(plan.first) + plan.edited, plan.deleted) == (14, 1)
    scaled = DocumentReport(
        complete=report.complete - 24, incomplete=report.incomplete, deleted=report.deleted,
        duplicates=report.duplicates, lost=report.lost,
    )  # fmt: skip
    assert documents_ok(document_figures(plan, [], scaled, 1.0)) is ok


def test_the_table_shows_both_passes_and_the_share_of_the_first() -> None:
    plan = document_plan(12)
    records = [
        chunk("a", FIRST, 0, 1000),
        chunk("a", EDITED, 0, 62),
        chunk("b", EDITED, 0, 9, True),
    ]
    report = DocumentReport(complete=14, deleted=1)
    shown = text_of(documents_lines(document_figures(plan, records, report, 2.5), cache_on=True))
    assert "documents: 12, then 2 edited" in shown and "in 2.5 s" in shown
    assert [line.split() for line in shown.splitlines() if line.startswith(" edit")] == [
        ["edit", "2", "2", "1", "62", "6.2%"]
    ]
    assert "every version ended complete" in shown and "cache off" not in shown
    off = text_of(documents_lines(document_figures(plan, records, report, 2.5), cache_on=False))
    assert "cache off: every chunk of an edited document is embedded again" in off
