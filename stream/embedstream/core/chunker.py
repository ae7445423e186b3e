"""Cut a document into chunks that fit the model, at places that stay put when the text is edited.

The text is first broken into units that each fit: paragraphs (blank lines), and only where a
paragraph is too long its sentences (terminators, line breaks), then a sentence's words, and last a
single word too long for any chunk by characters. Consecutive units are then merged into chunks.

Where to cut between units is content-defined, not packed greedily from the start (one edit would
move every later cut). A boundary carries a key: how strong it is (paragraph > sentence > word >
character) and the crc32 of the two units beside it. It is a cut when its key beats every other
boundary less than a distance d away (positions measured as the sum of the units' own counts; the
span's ends count as unbeatable), d = max(min_tokens, a quarter of the chunk's budget: a long
sentence cut into words is then not cut at every word). So cuts are at least d apart, small
paragraphs merge with a neighbour, and whether a boundary is a cut depends only on the text within
d of it: an edit moves at most one cut on each side of itself. A span between cuts whose text is
over the limit is cut again the same way with half the distance, down to a cut at every unit.

Overlap: a chunk (not the first) starts up to `overlap_tokens` early, at a word start in the
previous chunk's own text (never at its first word), so its span starts earlier. The
chunk's own text is kept within `max_tokens - overlap_tokens`, so the overlap always has room.

Whitespace: a unit's span never starts or ends with whitespace; the blank lines and spaces between
units belong to no chunk unless an overlap spans them. "Covers the text" means every
non-whitespace character is in some chunk. Spans start and end in strictly increasing order.

Counts are never added up to decide a limit: the counter need not be additive (`estimate_tokens`
adds one per call), so every candidate text is measured as it is. Counters must be monotone (a
longer text never counts fewer tokens), which the binary searches rely on.
"""

from __future__ import annotations

import re
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

from embedstream.core.tokens import TokenCounter, estimate_tokens

# Boundary strengths: a stronger boundary wins over a weaker one nearby.
PARAGRAPH, SENTENCE, WORD, CHARACTER = 3, 2, 1, 0

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_CLOSERS = "\"')\\]\u00bb\u201d\u2019\u300d\u300f"  # quotes and brackets after a terminator
# Latin terminators (and the ellipsis) need whitespace after them, so "3.14" stays whole; the
# CJK full stop, exclamation and question marks do not. A line break also ends a sentence.
_SENTENCE_BREAK = re.compile(
    f"[.!?\u2026]+[{_CLOSERS}]*(?=\\s)|[\u3002\uff01\uff1f]+[{_CLOSERS}]*|\n"
)
_WORD = re.compile(r"\S+")
_UNBEATABLE = 1 << 40  # above every key: strength << 32 | crc32


@dataclass(frozen=True, slots=True)
class ChunkingRules:
    # text-embedding models commonly accept 512 tokens (BERT family) or more; 512 fits all of them
    max_tokens: int = 512
    # a sentence-sized tail of context; 32 of 512 is 6%, so overlap adds few tokens to pay for
    overlap_tokens: int = 32
    # a quarter of max: short paragraphs and headings join a neighbour, chunks land around
    # 150-350 tokens, and most spans between cuts still fit without a second level of cuts
    min_tokens: int = 128

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not 0 <= self.overlap_tokens < self.max_tokens:
            raise ValueError(
                f"overlap_tokens must be in [0, max_tokens={self.max_tokens}), "
                f"got {self.overlap_tokens}"
            )
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(
                f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}"
            )


@dataclass(frozen=True, slots=True)
class Chunk:
    seq: int
    start: int  # [start, end) in the document, Python str indices
    end: int
    text: str  # == document[start:end]
    tokens: int  # count(text), overlap included


@dataclass(frozen=True, slots=True)
class _Unit:
    start: int
    end: int
    tokens: int
    strength: int  # of the boundary before this unit


def chunk_document(
    text: str, rules: ChunkingRules, count: TokenCounter = estimate_tokens
) -> list[Chunk]:
    """The chunks of `text`; [] when it has no non-whitespace character."""
    budget = rules.max_tokens - rules.overlap_tokens  # a chunk's own text; the rest is overlap
    units: list[_Unit] = []
    for start, end in _parts(text, 0, len(text), PARAGRAPH):
        _fit(text, start, end, PARAGRAPH, budget, count, units)
    if not units:
        return []
    cutter = _Cutter(text, units, budget, count)
    distance = max(rules.min_tokens, budget // 4)
    bodies = [(units[a].start, units[b - 1].end) for a, b in cutter.spans(0, len(units), distance)]
    chunks: list[Chunk] = []
    for seq, (body_start, body_end) in enumerate(bodies):
        start = body_start
        if seq and rules.overlap_tokens:
            start = _overlap_start(text, bodies[seq - 1], (body_start, body_end), rules, count)
        piece = text[start:body_end]
        chunks.append(Chunk(seq, start, body_end, piece, count(piece)))
    return chunks


def _stripped(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    piece = text[start:end]
    core = piece.strip()
    if core:
        first = start + len(piece) - len(piece.lstrip())
        yield first, first + len(core)


def _parts(text: str, start: int, end: int, kind: int) -> Iterator[tuple[int, int]]:
    """The spans of the paragraphs, sentences or words of text[start:end], whitespace trimmed."""
    if kind == WORD:
        for match in _WORD.finditer(text, start, end):
            yield match.span()
        return
    pattern = _PARAGRAPH_BREAK if kind == PARAGRAPH else _SENTENCE_BREAK
    cut = start
    for match in pattern.finditer(text, start, end):
        yield from _stripped(text, cut, match.end())
        cut = match.end()
    yield from _stripped(text, cut, end)


def _fit(
    text: str,
    start: int,
    end: int,
    kind: int,
    budget: int,
    count: TokenCounter,
    out: list[_Unit],
    strength: int | None = None,
) -> None:
    """Append text[start:end] as one unit, or as finer units when it is over the budget."""
    strength = kind if strength is None else strength
    tokens = count(text[start:end])
    if tokens <= budget:
        out.append(_Unit(start, end, tokens, strength))
    elif kind == WORD:
        _split_word(text, start, end, budget, count, out, strength)
    else:
        finer = kind - 1
        for index, (s, e) in enumerate(_parts(text, start, end, finer)):
            _fit(text, s, e, finer, budget, count, out, strength if index == 0 else finer)


def _split_word(
    text: str,
    start: int,
    end: int,
    budget: int,
    count: TokenCounter,
    out: list[_Unit],
    strength: int,
) -> None:
    """Cut one word over the budget into the longest pieces that fit, by characters."""
    while start < end:
        if count(text[start : start + 1]) > budget:
            raise ValueError(
                f"one character counts more than the {budget} tokens a chunk may hold; "
                "raise max_tokens or lower overlap_tokens"
            )
        fits, step = start + 1, 1  # gallop, then bisect: each probe measures at most 2x a piece
        while fits < end:
            probe = min(end, start + step * 2)
            if count(text[start:probe]) > budget:
                break
            fits, step = probe, step * 2
        over = min(end, start + step * 2) + 1 if fits < end else end + 1
        while over - fits > 1:
            middle = (fits + over) // 2
            if count(text[start:middle]) <= budget:
                fits = middle
            else:
                over = middle
        out.append(_Unit(start, fits, count(text[start:fits]), strength))
        start, strength = fits, CHARACTER


class _Cutter:
    """Chooses the cuts between units; boundary b is the one before unit b (0 and n: the ends)."""

    def __init__(self, text: str, units: list[_Unit], budget: int, count: TokenCounter) -> None:
        self._text = text
        self._units = units
        self._budget = budget
        self._count = count
        self._position = [0]
        for unit in units:
            self._position.append(self._position[-1] + unit.tokens)
        encoded = [text[u.start : u.end].encode("utf-8", "surrogatepass") for u in units]
        # crc32, not hash(): Python salts str hashes per process, and cuts must be the same
        # in every process and release.
        self._key = [_UNBEATABLE] + [
            units[b].strength << 32 | zlib.crc32(encoded[b], zlib.crc32(encoded[b - 1] + b"\0"))
            for b in range(1, len(units))
        ]

    def spans(self, lo: int, hi: int, distance: int) -> Iterator[tuple[int, int]]:
        """Unit ranges [a, b) that partition [lo, hi), each fitting the budget."""
        for a, b in pairwise([lo, *self._cuts(lo, hi, distance), hi]):
            if b - a == 1 or self._fits(a, b):
                yield a, b
            else:
                yield from self.spans(a, b, distance // 2)

    def _fits(self, a: int, b: int) -> bool:
        units = self._units
        return self._count(self._text[units[a].start : units[b - 1].end]) <= self._budget

    def _cuts(self, lo: int, hi: int, distance: int) -> list[int]:
        """Boundaries in (lo, hi) whose key beats every boundary less than `distance` away."""
        inner = range(lo + 1, hi)
        left = self._best_within(inner, lo, distance)
        right = self._best_within(reversed(inner), hi, distance)
        return [b for b in inner if self._key[b] > max(left[b], right[b])]

    def _best_within(self, order: Iterator[int] | range, end: int, distance: int) -> dict[int, int]:
        """For each boundary, the best key among those before it in `order` (from the unbeatable
        `end`) less than `distance` away: a sliding-window maximum, linear in the span."""
        position, key = self._position, self._key
        window: deque[tuple[int, int]] = deque([(position[end], _UNBEATABLE)])
        best: dict[int, int] = {}
        for b in order:
            while window and abs(position[b] - window[0][0]) >= distance:
                window.popleft()
            best[b] = window[0][1] if window else -1
            while window and window[-1][1] <= key[b]:
                window.pop()
            window.append((position[b], key[b]))
        return best


def _overlap_start(
    text: str,
    previous_body: tuple[int, int],
    body: tuple[int, int],
    rules: ChunkingRules,
    count: TokenCounter,
) -> int:
    """The earliest word start in the previous chunk's own text, after its first word, whose tail
    fits the overlap and keeps the whole chunk within max_tokens; the chunk's own start when none
    does. Never the previous chunk's first word: then starts strictly increase, and the choice
    depends on the previous chunk's own text only, not on that chunk's overlap (a chain)."""
    starts = [
        m.start()
        for m in _WORD.finditer(text, previous_body[0], previous_body[1])
        if m.start() > previous_body[0]
    ]

    def fits(start: int) -> bool:
        return (
            count(text[start : previous_body[1]]) <= rules.overlap_tokens
            and count(text[start : body[1]]) <= rules.max_tokens
        )

    low, high = 0, len(starts)  # the first index that fits, by bisection (fits is monotone)
    while low < high:
        middle = (low + high) // 2
        if fits(starts[middle]):
            high = middle
        else:
            low = middle + 1
    return starts[low] if low < len(starts) else body[0]
