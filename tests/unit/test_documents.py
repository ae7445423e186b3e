from __future__ import annotations

import random

import pytest
from embedstream.core.document_versions import (
    Complete,
    DocumentOrder,
    DocumentProgress,
    Final,
    Incomplete,
    default_version,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("chunk_count", "events", "final"),
    [
        (0, [], Complete("d", "v1", 0)),
        (1, [("done", 0)], Complete("d", "v1", 1)),
        (3, [("done", 2), ("done", 0), ("done", 1)], Complete("d", "v1", 3)),
        (3, [("done", 0), ("failed", 2), ("failed", 1)], Incomplete("d", "v1", 3, (1, 2))),
        (2, [("failed", 1), ("failed", 0)], Incomplete("d", "v1", 2, (0, 1))),
        # repeats are idempotent
        (
            2,
            [("done", 0), ("done", 0), ("failed", 1), ("failed", 1)],
            Incomplete("d", "v1", 2, (1,)),
        ),
        # a written result wins over a failure, in either order: it is in the output
        (2, [("failed", 0), ("done", 0), ("done", 1)], Complete("d", "v1", 2)),
        (2, [("done", 0), ("failed", 0), ("done", 1)], Complete("d", "v1", 2)),
    ],
)
def test_final_record(chunk_count: int, events: list[tuple[str, int]], final: Final) -> None:
    progress = DocumentProgress("d", "v1", chunk_count)
    seen: set[int] = set()
    assert progress.finished == (chunk_count == 0)
    for kind, seq in events:
        (progress.chunk_done if kind == "done" else progress.chunk_failed)(seq)
        seen.add(seq)
        assert progress.finished == (len(seen) == chunk_count)
    assert progress.final() == final


def test_not_finished_until_every_chunk_has_an_outcome() -> None:
    progress = DocumentProgress("d", "v1", 3)
    progress.chunk_done(0)
    progress.chunk_done(0)  # a repeat is not a second chunk
    progress.chunk_failed(1)
    assert not progress.finished
    with pytest.raises(ValueError, match="1 chunks have no outcome"):
        progress.final()


@pytest.mark.parametrize("seq", [-1, 3, 100])
@pytest.mark.parametrize("kind", ["done", "failed"])
def test_seq_out_of_range_is_refused(seq: int, kind: str) -> None:
    progress = DocumentProgress("d", "v1", 3)
    with pytest.raises(ValueError, match="out of range"):
        (progress.chunk_done if kind == "done" else progress.chunk_failed)(seq)


def test_negative_chunk_count_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_count"):
        DocumentProgress("d", "v1", -1)


@given(st.integers(0, 30), st.randoms(use_true_random=False))
def test_missing_is_exactly_the_failed_never_written(count: int, rng: random.Random) -> None:
    progress = DocumentProgress("d", "v", count)
    outcomes = {seq: rng.choice(["done", "failed"]) for seq in range(count)}
    events = [(seq, kind) for seq, kind in outcomes.items() for _ in range(rng.randint(1, 3))]
    rng.shuffle(events)
    for seq, kind in events:
        (progress.chunk_done if kind == "done" else progress.chunk_failed)(seq)
    missing = tuple(sorted(s for s, k in outcomes.items() if k == "failed"))
    expected = Incomplete("d", "v", count, missing) if missing else Complete("d", "v", count)
    assert progress.final() == expected


# DocumentOrder: (operation, doc_id, token, expected result)
ORDER_CASES = [
    ("different documents run side by side", [("admit", "a", 1, True), ("admit", "b", 2, True)]),
    (
        "a later version waits for the earlier one, then starts",
        [
            ("admit", "a", 1, True),
            ("admit", "a", 2, False),
            ("finished", "a", 1, 2),
            ("finished", "a", 2, None),
            ("admit", "a", 3, True),
        ],
    ),
    (
        "a tombstone waits behind the versions before it, in arrival order",
        [
            ("admit", "a", 1, True),
            ("admit", "a", 2, False),
            ("admit", "a", "tombstone@3", False),
            ("admit", "b", 4, True),
            ("finished", "b", 4, None),
            ("finished", "a", 1, 2),
            ("finished", "a", 2, "tombstone@3"),
            ("finished", "a", "tombstone@3", None),
        ],
    ),
]


@pytest.mark.parametrize(
    "steps", [steps for _, steps in ORDER_CASES], ids=[name for name, _ in ORDER_CASES]
)
def test_document_order(steps: list[tuple[str, str, object, object]]) -> None:
    order: DocumentOrder[object] = DocumentOrder(max_waiting=10)
    for operation, doc_id, token, expected in steps:
        result = (
            order.admit(doc_id, token) if operation == "admit" else order.finished(doc_id, token)
        )
        assert result == expected, (operation, doc_id, token)
    assert order.waiting == 0


@pytest.mark.parametrize(
    ("doc_id", "token", "match"),
    [("a", 2, "not the running"), ("b", 1, "not the running")],
)
def test_finishing_what_is_not_running_is_refused(doc_id: str, token: int, match: str) -> None:
    order: DocumentOrder[int] = DocumentOrder(max_waiting=10)
    order.admit("a", 1)
    order.admit("a", 2)  # waiting, not running
    with pytest.raises(ValueError, match=match):
        order.finished(doc_id, token)
    assert order.running("a") == 1


def test_the_wait_queue_is_bounded() -> None:
    order: DocumentOrder[int] = DocumentOrder(max_waiting=2)
    assert order.admit("a", 1)
    assert not order.admit("a", 2)
    assert not order.admit("a", 3)
    assert order.full
    assert order.admit("b", 4)  # nothing running for b: it starts and takes no room
    with pytest.raises(OverflowError):
        order.admit("a", 5)
    assert order.finished("a", 1) == 2
    assert not order.full
    assert not order.admit("b", 6)
    assert order.waiting == 2


def test_max_waiting_zero_runs_one_per_document_and_queues_nothing() -> None:
    order: DocumentOrder[int] = DocumentOrder(max_waiting=0)
    assert order.admit("a", 1)
    with pytest.raises(OverflowError):
        order.admit("a", 2)
    with pytest.raises(ValueError, match="max_waiting"):
        DocumentOrder[int](max_waiting=-1)


@given(st.lists(st.sampled_from("abc"), max_size=40), st.randoms(use_true_random=False))
def test_each_document_runs_its_events_one_at_a_time_in_arrival_order(
    doc_ids: list[str], rng: random.Random
) -> None:
    order: DocumentOrder[int] = DocumentOrder(max_waiting=len(doc_ids))
    running: dict[str, int] = {}
    started: list[tuple[str, int]] = []
    for token, doc_id in enumerate(doc_ids):
        if order.admit(doc_id, token):
            assert doc_id not in running
            running[doc_id] = token
            started.append((doc_id, token))
        while running and rng.random() < 0.4:  # finish some, in any order across documents
            done_id = rng.choice(sorted(running))
            following = order.finished(done_id, running.pop(done_id))
            if following is not None:
                running[done_id] = following
                started.append((done_id, following))
    while running:
        done_id = sorted(running)[0]
        following = order.finished(done_id, running.pop(done_id))
        if following is not None:
            running[done_id] = following
            started.append((done_id, following))
    for doc_id in set(doc_ids):
        arrived = [t for t, d in enumerate(doc_ids) if d == doc_id]
        assert [t for d, t in started if d == doc_id] == arrived
    assert order.waiting == 0


def test_default_version_is_a_stable_16_digit_digest() -> None:
    version = default_version("hello")
    assert version == "2cf24dba5fb0a30e"  # sha256("hello"), the same in every process
    assert default_version("hello") == version
    assert default_version("hello!") != version
    assert len(default_version("")) == 16
    assert default_version("\ud800") != default_version("")  # a lone surrogate does not raise
