from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable

import pytest
from embedstream.core.chunker import Chunk, ChunkingRules, chunk_document
from embedstream.core.tokens import TokenCounter, estimate_tokens
from hypothesis import given, settings
from hypothesis import strategies as st


def words(text: str) -> int:
    return len(text.split())


COUNTERS: list[TokenCounter] = [estimate_tokens, words]


def bodies(chunks: list[Chunk]) -> list[str]:
    return [c.text for c in chunks]


def check_invariants(text: str, rules: ChunkingRules, count: TokenCounter) -> list[Chunk]:
    chunks = chunk_document(text, rules, count)
    covered = bytearray(len(text))
    for seq, chunk in enumerate(chunks):
        assert chunk.seq == seq
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.text == chunk.text.strip()  # a span never starts or ends in whitespace
        assert chunk.tokens == count(chunk.text) <= rules.max_tokens
        covered[chunk.start : chunk.end] = b"\1" * (chunk.end - chunk.start)
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))
    for before, after in itertools.pairwise(chunks):
        assert before.start < after.start and before.end < after.end
    return chunks


W = ChunkingRules(max_tokens=6, overlap_tokens=0, min_tokens=0)  # word counter, no merging


@pytest.mark.parametrize(
    ("text", "rules", "expected"),
    [
        ("", W, []),
        (" \n\n\t \n ", W, []),
        ("one", W, ["one"]),
        ("  padded  ", W, ["padded"]),
        # min 0: every paragraph is its own chunk, blank lines belong to none
        ("a b\n\n\n  c d\n \nnaïve café", W, ["a b", "c d", "naïve café"]),
        # a paragraph of exactly max words stays whole; one word more splits it at the sentence
        ("a b c d e f", W, ["a b c d e f"]),
        ("a b c. d e f g", W, ["a b c.", "d e f g"]),
        # a line break inside a paragraph ends a sentence
        ("a b c d\ne f g", W, ["a b c d", "e f g"]),
        # "3.14" is no sentence end: only terminators followed by whitespace are
        ("pi is 3.14 it is. x y z", W, ["pi is 3.14 it is.", "x y z"]),
    ],
)
def test_chunks_by_words(text: str, rules: ChunkingRules, expected: list[str]) -> None:
    assert bodies(check_invariants(text, rules, words)) == expected


def test_a_long_sentence_splits_between_words_into_several_word_chunks() -> None:
    text = " ".join(f"w{i}" for i in range(80))
    chunks = check_invariants(
        text, ChunkingRules(max_tokens=12, overlap_tokens=0, min_tokens=0), words
    )
    assert " ".join(c.text for c in chunks) == text  # never inside a word
    assert all(words(c.text) >= 2 for c in chunks)  # cuts a quarter of max apart, not each word
    assert len(chunks) < 40


def test_cjk_without_spaces_splits_at_full_stops() -> None:
    rules = ChunkingRules(max_tokens=12, overlap_tokens=0, min_tokens=0)
    text = "今日は晴れです。明日は雨でしょう。"  # 24 bytes per sentence: 9 estimated tokens
    assert bodies(check_invariants(text, rules, estimate_tokens)) == [
        "今日は晴れです。",
        "明日は雨でしょう。",
    ]


@pytest.mark.parametrize("word", ["x" * 1000, "é" * 500, "😀" * 300, "今" * 400])
def test_a_giant_word_is_cut_by_characters_into_pieces_that_fit(word: str) -> None:
    rules = ChunkingRules(max_tokens=50, overlap_tokens=0, min_tokens=0)
    text = f"before\n\n{word}\n\nafter"
    chunks = check_invariants(text, rules, estimate_tokens)
    start, end = text.index(word), text.index(word) + len(word)
    inside = [c for c in chunks if start <= c.start and c.end <= end]
    assert len(inside) >= len(word.encode()) // 150  # pieces of at most ~150 bytes
    assert all(c.tokens >= 45 for c in inside)  # the longest pieces that fit, not char by char


def test_small_paragraphs_merge_and_big_ones_stand_alone() -> None:
    rules = ChunkingRules(max_tokens=40, overlap_tokens=0, min_tokens=10)
    big = [" ".join(f"{p}{i}" for i in range(15)) for p in "ab"]
    small = ["Title one", "tiny", "also tiny"]  # 2 + 1 + 2 words, each under min
    text = "\n\n".join([big[0], *small, big[1]])
    chunks = check_invariants(text, rules, words)
    # the small ones sit within min of each other, so at most one cut falls among them and
    # no chunk is just a small paragraph
    assert all(words(c.text) >= 10 for c in chunks)
    assert len(chunks) <= 3
    assert not any(c.text in small for c in chunks)


def test_min_tokens_keeps_cuts_apart() -> None:
    rules = ChunkingRules(max_tokens=48, overlap_tokens=0, min_tokens=12)
    rng = random.Random(5)
    text = "\n\n".join(
        " ".join(f"w{rng.randrange(99)}" for _ in range(rng.randint(1, 6))) for _ in range(200)
    )
    chunks = check_invariants(text, rules, words)
    assert len(chunks) > 20
    assert all(words(c.text) >= 12 for c in chunks)


def test_overlap_prefixes_whole_words_of_the_previous_chunk() -> None:
    rules = ChunkingRules(max_tokens=8, overlap_tokens=3, min_tokens=0)
    text = "a b c d e\n\nf g h i j"
    chunks = check_invariants(text, rules, words)
    assert bodies(chunks) == ["a b c d e", "c d e\n\nf g h i j"]
    assert chunks[1].start == text.index("c")


def test_overlap_never_pushes_a_chunk_over_max() -> None:
    # the counter is not additive: the overlap is measured together with the chunk
    rules = ChunkingRules(max_tokens=20, overlap_tokens=10, min_tokens=0)
    text = "\n\n".join(["alpha beta gamma delta epsilon zeta"] * 6)
    chunks = check_invariants(text, rules, estimate_tokens)
    assert any(c.start < text.find("\n\n", c.start) for c in chunks[1:])  # overlap happened


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("max_tokens", {"max_tokens": 0}),
        ("overlap_tokens", {"overlap_tokens": -1}),
        ("overlap_tokens", {"max_tokens": 10, "overlap_tokens": 10}),
        ("min_tokens", {"min_tokens": -1}),
        ("min_tokens", {"max_tokens": 10, "overlap_tokens": 0, "min_tokens": 11}),
    ],
)
def test_rules_name_the_bad_field(field: str, kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=field):
        ChunkingRules(**kwargs)


def test_a_character_over_the_limit_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        chunk_document("x", ChunkingRules(max_tokens=1, overlap_tokens=0, min_tokens=0))


def _prose(rng: random.Random, size: int) -> str:
    vocabulary = [
        "".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 9))) for _ in range(3000)
    ]
    paragraphs: list[str] = []
    while sum(map(len, paragraphs)) < size:
        sentences = (
            " ".join(rng.choice(vocabulary) for _ in range(rng.randint(4, 20))) + "."
            for _ in range(rng.randint(1, 8))
        )
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)[:size]


@pytest.mark.parametrize("shape", ["prose", "one paragraph", "no whitespace"])
def test_a_100_kb_document_is_counted_in_linear_work(shape: str) -> None:
    """No quadratic re-counting: the characters the counter is asked to measure stay within a
    small multiple of the text's length (a packer re-measuring from the start fails this;
    speed itself is measured in benchmarks, never asserted in tests)."""
    text = _prose(random.Random(1), 100_000)
    text = {
        "prose": text,
        "one paragraph": text.replace("\n\n", " "),
        "no whitespace": "".join(text.split()),
    }[shape]
    measured = 0

    def counting(piece: str) -> int:
        nonlocal measured
        measured += len(piece)
        return estimate_tokens(piece)

    chunks = chunk_document(text, ChunkingRules(), counting)
    assert chunks and all(c.tokens <= 512 for c in chunks)
    assert measured < 25 * len(text), f"measured {measured / len(text):.1f} characters per one"


# Property tests -------------------------------------------------------------------------------

WORDS = st.sampled_from(
    ["a", "bb", "ccc", "dddd", "Émile", "naïve", "東京", "😀", "x.", "y!", "3.14"]
)
PARAGRAPH = st.lists(WORDS, min_size=1, max_size=30).map(" ".join)
SEPARATOR = st.sampled_from(["\n\n", "\n \n", "\n\n\n", " \n\t\n"])
RULES = st.builds(
    lambda m, o, n: ChunkingRules(max_tokens=m, overlap_tokens=min(o, m - 1), min_tokens=min(n, m)),
    st.integers(4, 60),
    st.integers(0, 12),
    st.integers(0, 30),
)


@st.composite
def documents(draw: st.DrawFn) -> str:
    paragraphs = draw(st.lists(PARAGRAPH, max_size=25))
    glue = draw(SEPARATOR)
    spaces = draw(st.sampled_from(["", " ", "\n", "  \t"]))
    return spaces + glue.join(paragraphs) + spaces


@given(documents(), RULES, st.sampled_from(COUNTERS))
def test_chunks_cover_the_text_within_the_limits(
    text: str, rules: ChunkingRules, count: TokenCounter
) -> None:
    if count is estimate_tokens and rules.max_tokens - rules.overlap_tokens < 3:
        rules = ChunkingRules(rules.max_tokens + 3, rules.overlap_tokens, rules.min_tokens)
    chunks = check_invariants(text, rules, count)
    assert chunks == chunk_document(text, rules, count)  # deterministic
    assert (chunks == []) == (text.strip() == "")


@given(st.text(max_size=300), RULES)
def test_any_text_keeps_the_invariants(text: str, rules: ChunkingRules) -> None:
    rules = ChunkingRules(rules.max_tokens + 3, rules.overlap_tokens, rules.min_tokens)
    check_invariants(text, rules, estimate_tokens)


Chunker = Callable[[str, ChunkingRules, TokenCounter], list[Chunk]]


def _unchanged_far_from_the_edit(
    old: list[str],
    new: list[str],
    edited: int,
    rules: ChunkingRules,
    count: TokenCounter,
    chunker: Chunker = chunk_document,
) -> None:
    """Chunks more than `reach` tokens (the text between them and the edited paragraph, counted
    as one piece) away from the edit are the same text at the same place, shifted by the edit.

    reach = budget + 2 * d (budget = max - overlap, d = max(min, budget // 4), the chunker's cut
    distance): an edit moves cuts less than d away from it; the span between a moved cut and the
    next one (at most the budget when it needs no second level of cuts) may then be cut again
    differently; d more covers that second level's own moved cuts. +1: the gap's count is of one
    text, the chunker's distances are sums of pieces' counts (estimate_tokens adds one per call).
    """
    budget = rules.max_tokens - rules.overlap_tokens
    reach = budget + 2 * max(rules.min_tokens, budget // 4) + 1
    glue = "\n\n"
    before, after = glue.join(old), glue.join(new)
    start = sum(len(p) + len(glue) for p in old[:edited])
    end, shift = start + len(old[edited]), len(new[edited]) - len(old[edited])

    def far(chunks: list[Chunk], text: str, end: int, shift: int) -> set[tuple[int, str]]:
        found = set()
        for c in chunks:
            if c.end <= start and count(text[c.end : start]) > reach:
                found.add((c.start, c.text))
            elif c.start >= end and count(text[end : c.start]) > reach:
                found.add((c.start - shift, c.text))
        return found

    old_chunks = chunker(before, rules, count)
    new_chunks = chunker(after, rules, count)
    old_far = far(old_chunks, before, end, 0)
    new_far = far(new_chunks, after, end + shift, shift)
    # every far chunk on one side is there on the other (the reach is measured on each text)
    assert old_far <= {(c.start if c.end <= start else c.start - shift, c.text) for c in new_chunks}
    assert new_far <= {(c.start, c.text) for c in old_chunks}


PROSE_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
PROSE = st.lists(
    st.lists(PROSE_WORDS, min_size=1, max_size=12).map(lambda ws: " ".join(ws) + "."),
    min_size=1,
    max_size=5,
).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(PROSE, min_size=2, max_size=40),
    st.data(),
    RULES,
    st.sampled_from(COUNTERS),
)
def test_an_edit_changes_only_chunks_near_it(
    paragraphs: list[str],
    data: st.DataObject,
    rules: ChunkingRules,
    count: TokenCounter,
) -> None:
    if count is estimate_tokens:  # letters: a word can always fit
        rules = ChunkingRules(rules.max_tokens + 8, rules.overlap_tokens, rules.min_tokens)
    edited = data.draw(st.integers(0, len(paragraphs) - 1))
    replacement = data.draw(PROSE)
    new = [*paragraphs[:edited], replacement, *paragraphs[edited + 1 :]]
    _unchanged_far_from_the_edit(paragraphs, new, edited, rules, count)


def _greedy(text: str, rules: ChunkingRules, count: TokenCounter) -> list[Chunk]:
    """What the chunker must not be: words packed from the start of the document."""
    out: list[Chunk] = []
    start = 0
    for match in re.finditer(r"\S+", text):
        if count(text[start : match.end()]) > rules.max_tokens:
            piece = text[start : match.start()].rstrip()
            out.append(Chunk(len(out), start, start + len(piece), piece, count(piece)))
            start = match.start()
    out.append(Chunk(len(out), start, len(text), text[start:], count(text[start:])))
    return out


def test_the_locality_check_catches_greedy_packing() -> None:
    paragraphs = [f"p{i} alpha beta." for i in range(60)]
    new = [*paragraphs[:3], "p3 alpha beta gamma.", *paragraphs[4:]]
    rules = ChunkingRules(max_tokens=10, overlap_tokens=0, min_tokens=2)
    with pytest.raises(AssertionError):
        _unchanged_far_from_the_edit(paragraphs, new, 3, rules, words, _greedy)
    _unchanged_far_from_the_edit(paragraphs, new, 3, rules, words)


def test_most_edits_change_at_most_one_chunk_on_each_side() -> None:
    """Typical locality, on a seeded corpus (so not flaky): besides the chunks overlapping the
    edited paragraph, at most one chunk before and one after change in nearly every edit."""
    rng = random.Random(7)
    rules = ChunkingRules()
    tight = 0
    trials = 30
    for _ in range(trials):
        paragraphs = _prose(rng, 20_000).split("\n\n")
        edited = rng.randrange(len(paragraphs))
        new = list(paragraphs)
        new[edited] = _prose(rng, max(10, len(paragraphs[edited]) + rng.randint(-80, 80)))
        new[edited] = " ".join(new[edited].split())
        start = sum(len(p) + 2 for p in paragraphs[:edited])
        end, shift = start + len(paragraphs[edited]), len(new[edited]) - len(paragraphs[edited])
        old_chunks = chunk_document("\n\n".join(paragraphs), rules)
        kept = {
            (c.start if c.end <= start else c.start - shift, c.text)
            for c in chunk_document("\n\n".join(new), rules)
        }
        touching = [i for i, c in enumerate(old_chunks) if c.start < end and c.end > start]
        lost = [i for i, c in enumerate(old_chunks) if (c.start, c.text) not in kept]
        before = [i for i in lost if i < touching[0]]
        after = [i for i in lost if i > touching[-1]]
        assert len(old_chunks) > 20
        tight += len(before) <= 1 and len(after) <= 1
    assert tight >= trials * 0.9, tight
