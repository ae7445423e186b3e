"""The re-embed plan (core/reembed.py): documents, chunks and tokens from what a store holds,
calls and time from the limits."""

from __future__ import annotations

import pytest
from embedstream.core.chunker import ChunkingRules, chunk_document
from embedstream.core.reembed import CallLimits, PlanTally, StoredChunk, reconstruct
from embedstream.core.tokens import estimate_tokens

RULES = ChunkingRules(40, 0, 0)
UNLIMITED = CallLimits(inputs_per_call=256, tokens_per_call=100_000, rpm=0, tpm=0)


def stored(text: str, rules: ChunkingRules = RULES) -> list[StoredChunk]:
    """The chunk rows a store holds for ``text`` cut with ``rules``, texts kept."""
    chunks = chunk_document(text, rules)
    return [
        StoredChunk(len(chunks), (c.start, c.end), len(c.text.encode()), c.text) for c in chunks
    ]


def paragraphs(*words: str) -> str:
    return "\n\n".join(f"{w:_<5} " * 12 for w in words)


DOCS = [paragraphs("alpha", "beta", "gamma"), paragraphs("delta"), "é" * 30, ""]


def test_with_the_same_chunking_the_stored_chunks_are_counted_as_the_processor_counts() -> None:
    tally = PlanTally(RULES, same_chunking=True, texts=False)
    for text in DOCS:
        tally.add(stored(text))
    plan = tally.plan(UNLIMITED, requests=7)
    chunks = [c for text in DOCS for c in chunk_document(text, RULES)]
    assert (plan.documents, plan.chunks, plan.basis, plan.requests) == (4, len(chunks), "chunks", 7)
    assert plan.tokens == sum(estimate_tokens(c.text) for c in chunks)
    assert plan.calls == 1 and plan.minutes is None


def test_a_chunk_missing_from_the_store_counts_at_the_mean_of_its_siblings() -> None:
    rows = stored(paragraphs("alpha", "beta", "gamma"))
    tally = PlanTally(RULES, same_chunking=True, texts=False)
    tally.add([rows[0], rows[2]])  # chunk 1 was dead-lettered
    assert tally.chunks == 3
    mean = -(-(estimate_tokens(rows[0].text or "") + estimate_tokens(rows[2].text or "")) // 2)
    assert tally.tokens == estimate_tokens(rows[0].text or "") * 2 + mean


def test_with_other_chunking_the_kept_texts_are_cut_again() -> None:
    target = ChunkingRules(20, 4, 0)
    tally = PlanTally(target, same_chunking=False, texts=True)
    for text in DOCS:
        tally.add(stored(text))
    again = [c for text in DOCS for c in chunk_document(text, target)]
    assert tally.basis == "texts"
    assert tally.chunks == len(again)
    assert tally.tokens == sum(c.tokens for c in again)


def test_the_text_put_back_together_differs_only_in_whitespace_between_chunks() -> None:
    text = paragraphs("alpha", "beta", "gamma")
    rebuilt = reconstruct([(r.span, r.text or "") for r in stored(text)])
    assert len(rebuilt) == len(text.rstrip())
    assert rebuilt.split() == text.split()


def test_without_texts_the_lengths_give_a_lower_bound() -> None:
    target = ChunkingRules(20, 4, 0)
    tally = PlanTally(target, same_chunking=False, texts=False)
    for text in DOCS:
        tally.add([StoredChunk(r.chunk_count, r.span, None) for r in stored(text)])
    again = [c for text in DOCS for c in chunk_document(text, target)]
    assert tally.basis == "spans"
    assert 0 < tally.chunks <= len(again)


@pytest.mark.parametrize(
    ("limits", "calls", "minutes"),
    [
        (CallLimits(10, 1_000_000, 0, 0), 10, None),  # 100 inputs, 10 a call
        (CallLimits(256, 2_500, 0, 0), 4, None),  # 10,000 tokens, 2,500 a call
        (CallLimits(10, 1_000_000, 5, 0), 10, 2.0),  # 10 calls at 5 a minute
        (CallLimits(10, 1_000_000, 5, 1_000), 10, 10.0),  # 10,000 tokens at 1,000 a minute
    ],
)
def test_calls_and_time_are_the_least_the_limits_allow(
    limits: CallLimits, calls: int, minutes: float | None
) -> None:
    tally = PlanTally(RULES, same_chunking=True, texts=False)
    for _ in range(100):
        tally.add([StoredChunk(1, (0, 297), 297)])  # 100 tokens each
    plan = tally.plan(limits, requests=0)
    assert (plan.chunks, plan.tokens) == (100, 10_000)
    assert (plan.calls, plan.minutes) == (calls, minutes)
