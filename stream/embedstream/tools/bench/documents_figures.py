"""The documents scenario's texts and rows, pure (issue 18's edit benchmark).

No I/O and no clock: ``documents`` measures three passes through one processor (the documents,
the same documents with one paragraph edited in a share of them, plain requests of the same
number of paragraph-sized texts), and these functions make the texts and turn the passes into
table rows, so the arithmetic (the tokens of the edit pass as a share of the first, chunks/s
beside plain items/s) is checked by unit tests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from embedstream.tools.bench.figures import Row

# The words of bench/cache_scenario.py, so that the figures compare with the earlier
# standalone script's (about one chunk per 160-word paragraph at the default chunking rules).
_VOCABULARY = "the a of and to in is for on with stream kafka vector batch token index document"
DOCUMENT_WORDS = (*_VOCABULARY.split(), "search", "query", "retry", "offset", "latency", "cache")
PARAGRAPH_WORDS = 160
EDIT_MARK = "EDITED"


def paragraph(rng: random.Random, words: int = PARAGRAPH_WORDS) -> str:
    """Sentences of 12 words, ``words`` words in all (rounded down to whole sentences)."""
    sentences = []
    for _ in range(words // 12):
        sentence = " ".join(rng.choice(DOCUMENT_WORDS) for _ in range(12))
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(sentences)


def make_documents(
    docs: int, paragraphs: int, edited_share: float, seed: int
) -> tuple[list[str], list[str]]:
    """The first pass's texts and the second's: one word of one paragraph replaced in
    ``edited_share`` of the documents (a local edit: the chunker's other cuts stay)."""
    rng = random.Random(seed)
    first = [
        "\n\n".join(f"doc {d} part {p}. " + paragraph(rng) for p in range(paragraphs))
        for d in range(docs)
    ]
    second = list(first)
    for d in rng.sample(range(docs), round(docs * edited_share)):
        parts = first[d].split("\n\n")
        p = rng.randrange(len(parts))
        words = parts[p].split(" ")
        words[len(words) // 2] = EDIT_MARK
        parts[p] = " ".join(words)
        second[d] = "\n\n".join(parts)
    return first, second


def plain_texts(count: int, seed: int) -> list[str]:
    """``count`` distinct paragraph-sized texts for the plain-requests pass."""
    rng = random.Random(seed + 1)
    return [f"request {i}. " + paragraph(rng) for i in range(count)]


@dataclass(frozen=True, slots=True)
class DocumentPass:
    """One pass through the processor, measured."""

    name: str  # "first", "edited" or "plain"
    records: int  # events published (documents or requests)
    items: int  # work items made of them: chunks, or requests
    ended: int  # documents ended (complete or incomplete), or results written
    inputs: int  # texts the provider was sent (the cache's misses)
    tokens: int  # tokens the provider counted; 0 when unknown (a real endpoint)
    calls: int
    seconds: float  # from the first publication to the last ending
    cpu_s: float  # this process: processor and publisher
    provider_cpu_s: float | None

    @property
    def per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0


def share(part: float, whole: float) -> float:
    """``part`` as a percentage of ``whole``; 0 when ``whole`` is 0."""
    return 100.0 * part / whole if whole > 0 else 0.0


def document_rows(
    passes: Sequence[DocumentPass], docs: int, paragraphs: int, edited_share: float, broker: str
) -> list[Row]:
    """One row per pass: the edit pass's tokens as a share of the first pass's in its name,
    the plain pass's items/s beside the documents' chunks/s (the ratio in its name)."""
    first = passes[0]
    name = f"documents {docs:,}x{paragraphs}"
    rows = []
    for one in passes:
        if one.name == "first":
            label = f"{name}: first pass, {one.items:,} chunks"
        elif one.name == "edited":
            label = (
                f"{name}: {edited_share:.0%} edited, tokens {share(one.tokens, first.tokens):.1f}%"
                " of the first pass"
            )
        else:
            ratio = first.per_s / one.per_s if one.per_s > 0 else 0.0
            label = f"{name}: plain requests, chunks/s {ratio:.2f}x items/s"
        rows.append(
            Row(
                scenario=label,
                kind="documents",
                items=one.items,
                seconds=one.seconds,
                bound_per_s=None,
                latency=None,
                calls=one.calls,
                inputs=one.inputs,
                client_cpu_s=one.cpu_s,
                provider_cpu_s=one.provider_cpu_s,
                failed=one.records - one.ended,
                note=f"{broker}; cache=memory; {one.tokens:,} tokens sent",
            )
        )
    return rows
