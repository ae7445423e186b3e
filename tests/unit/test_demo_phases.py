"""The demo's request phases as planned (pure): ids, lanes, send times, when to stop."""

from __future__ import annotations

import pytest
from embedstream.tools.demo.phases import LanesPhase, Phase, backlog_drained, plan
from embedstream.tools.demo.texts import sample_texts, text_stream


def test_a_sparse_phase_then_the_lanes_phase_with_distinct_ids() -> None:
    sparse, lanes = plan(10, 40.0, 25, 50.0)
    assert isinstance(sparse, Phase) and isinstance(lanes, LanesPhase)
    assert (sparse.name, sparse.items, sparse.rate) == ("sparse", 10, 40.0)
    assert (lanes.name, lanes.backlog, lanes.high_rate, lanes.high) == ("lanes", 25, 50.0, 0)
    ran = lanes.sent(4)
    ids = [rid for phase in (sparse, ran) for rid, _ in phase.requests()]
    assert len(ids) == len(set(ids)) == 39
    # Numbers run on across phases (each request has a text of its own), the high requests
    # after the backlog.
    assert ids[0] == "sparse-0" and ids[10] == "lanes-10" and ids[-1] == "lanes-38"
    assert [lane for _, lane in sparse.requests()].count("high") == 2  # one in five
    assert [lane for _, lane in ran.requests()] == ["low"] * 25 + ["high"] * 4


def test_an_empty_sparse_phase_is_left_out() -> None:
    (lanes,) = plan(0, 40.0, 5, 50.0)
    assert isinstance(lanes, LanesPhase) and lanes.first == 0
    assert lanes.backlog_requests()[0] == ("lanes-0", "low")


def test_the_phase_as_it_ran_counts_its_high_requests() -> None:
    planned = LanesPhase(100, 20.0, first=7)
    ran = planned.sent(3)
    assert (planned.items, ran.items) == (100, 103)
    assert ran.high_request(0) == ("lanes-107", "high")
    assert ran.requests()[-3:] == [("lanes-107", "high"), ("lanes-108", "high"),
                                   ("lanes-109", "high")]  # fmt: skip
    assert planned.high == 0  # frozen: the plan is unchanged


def test_sparse_requests_are_spaced_at_their_rate() -> None:
    (sparse, _) = plan(4, 20.0, 1, 50.0)
    assert isinstance(sparse, Phase)
    assert [sparse.send_at(i) for i in range(4)] == [0.0, 0.05, 0.1, 0.15]


@pytest.mark.parametrize(
    ("elapsed_s", "due"),
    [
        (-0.01, 0),  # not started
        (0.0, 1),  # the first goes at once
        (0.099, 1),
        (0.1, 2),  # exactly due (0.1 * 10 is not below 1)
        (1.05, 11),
    ],
)
def test_high_requests_fall_due_at_their_rate(elapsed_s: float, due: int) -> None:
    assert LanesPhase(50, 10.0).high_due(elapsed_s) == due


def test_a_request_exactly_due_is_not_left_to_the_next_poll() -> None:
    # 0.29 * 100 is 28.999999999999996 in floats: the 30th request is due all the same.
    assert LanesPhase(50, 100.0).high_due(0.29) == 30


def test_the_next_high_request_is_due_one_interval_after_the_last() -> None:
    lanes = LanesPhase(50, 4.0)
    assert lanes.next_high_in(1, 0.0) == 0.25
    assert lanes.next_high_in(3, 0.5) == 0.25
    assert lanes.next_high_in(2, 0.75) == 0.0  # late: at once, never a negative wait


@pytest.mark.parametrize(
    ("low_results", "dead_letters", "drained"),
    [
        (0, 0, False),
        (99, 0, False),
        (100, 0, True),
        (98, 2, True),  # a dead letter is counted in no lane: one ends a request all the same
        (120, 0, True),
    ],
)
def test_the_backlog_has_drained_when_each_request_has_an_outcome(
    low_results: float, dead_letters: float, drained: bool
) -> None:
    assert backlog_drained(100, low_results, dead_letters) is drained


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_a_rate_must_be_positive_and_finite(rate: float) -> None:
    with pytest.raises(ValueError, match="rate"):
        Phase("sparse", 3, rate)
    with pytest.raises(ValueError, match="rate"):
        LanesPhase(3, rate)


@pytest.mark.parametrize(
    ("make", "word"),
    [
        (lambda: Phase("sparse", -1, 1.0), "items"),
        (lambda: LanesPhase(-1, 1.0), "backlog"),
        (lambda: LanesPhase(1, 1.0).sent(-1), "high"),
    ],
)
def test_counts_must_not_be_negative(make: object, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("phase", "words"),
    [
        (Phase("sparse", 200, 40.0), "sparse: 200 requests at 40/s"),
        (LanesPhase(9000, 50.0), "lanes: 9,000 low requests at once, then high ones at 50/s"),
    ],
)
def test_a_phase_describes_itself(phase: Phase | LanesPhase, words: str) -> None:
    assert phase.describe() == words


def test_the_text_stream_goes_on_where_the_sample_ends() -> None:
    stream = text_stream()
    first = [next(stream) for _ in range(60)]
    assert first == sample_texts(60)  # the same texts for a seed, however they are taken
    assert len(set(first)) == 60 and first[42].startswith("#42 ")
    assert next(stream).startswith("#60 ")
