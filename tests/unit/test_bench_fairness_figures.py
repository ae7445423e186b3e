"""The rows of the kafka-fairness scenario (pure): the two ratios of issue 21's goals, the
rows per arm, and the options that size it."""

from __future__ import annotations

import argparse

import pytest
from embedstream.tools.bench.fairness_figures import (
    Arm,
    Ratios,
    Trickle,
    fairness_rows,
    ratios,
    trickle_stage_rows,
)
from embedstream.tools.bench.kafka_figures import Drain
from embedstream.tools.bench.options import ALIASES, SCENARIOS, add_cli_arguments, sizes_from_args


def drain(items: int, seconds: float, expected: int | None = None) -> Drain:
    return Drain(items, seconds, 10, items, 1.0, 0.5, expected or items)


def trickle(*latencies_ms: float) -> Trickle:
    return Trickle([ms / 1000 for ms in latencies_ms], len(latencies_ms) + 1, 5.0)


@pytest.mark.parametrize(
    ("a_alone", "b_alone", "arm", "expected"),
    [
        # B's P99 doubles, A keeps 90%: both goals met.
        (drain(1000, 1.0), trickle(50, 50), Arm("x", drain(1000, 1.0 / 0.9), trickle(100, 100)),
         Ratios(2.0, 0.9)),
        (drain(1000, 1.0), trickle(50), Arm("x", drain(1000, 2.0), trickle(500)),
         Ratios(10.0, 0.5)),
        # Nothing measured: no ratio rather than a division by zero.
        (drain(0, 0.0), trickle(), Arm("x", drain(10, 1.0), trickle()), Ratios(None, None)),
    ],
)  # fmt: skip
def test_ratios(a_alone: Drain, b_alone: Trickle, arm: Arm, expected: Ratios) -> None:
    got = ratios(a_alone, b_alone, arm)
    assert got.b_p99 == pytest.approx(expected.b_p99)
    assert got.a_drain == pytest.approx(expected.a_drain)


@pytest.mark.parametrize(
    ("found", "met"),
    [(Ratios(2.0, 0.85), True), (Ratios(2.01, 0.9), False), (Ratios(1.0, 0.84), False),
     (Ratios(None, 0.9), False)],
)  # fmt: skip
def test_goals(found: Ratios, met: bool) -> None:
    assert found.goals_met is met


def test_rows_carry_the_ratios_in_their_names_and_the_stages_of_b() -> None:
    moments = {"b-0": {"scheduled": 0.0, "published": 0.01, "fetched": 0.5, "call_start": 0.6}}
    shares = Arm("shares", drain(900, 1.0, 1000), Trickle([0.1, 0.1], 3, 5.0, moments))
    fifo = Arm("calls FIFO", drain(1000, 1.25), trickle(400, 400))
    rows = fairness_rows(drain(1000, 1.0), trickle(50, 50), [shares, fifo], 20.0, "Kafka")
    names = [row.scenario for row in rows]
    kinds = ["kafka-fairness-trickle", "kafka-fairness-drain"]
    assert [row.kind for row in rows[:4]] == [*kinds, *reversed(kinds)]
    assert names[2].endswith("A with B, shares (90% of alone)")
    assert names[3].endswith("B with A, shares (P99 2.0x alone)")
    assert rows[2].failed == 100 and rows[3].failed == 1
    stages = [row for row in rows if row.kind == "kafka-stage"]
    assert [row.scenario.rsplit(": ", 1)[1] for row in stages] == [
        "scheduled -> published", "published -> fetched", "fetched -> call_start"]  # fmt: skip
    assert stages[1].latency is not None and stages[1].latency.p99_ms == pytest.approx(490.0)
    assert names[-2].endswith("A with B, calls FIFO (80% of alone)")
    assert names[-1].endswith("B with A, calls FIFO (P99 8.0x alone)")
    assert trickle_stage_rows(trickle(1.0), "none") == []


def test_the_scenario_is_chosen_by_name_and_sized_by_its_options() -> None:
    assert "kafka-fairness" in SCENARIOS and "kafka-fairness" in ALIASES["all"]
    assert "kafka-fairness" not in ALIASES["kafka"]  # too long for the group
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_cli_arguments(parser)
    ns = parser.parse_args(["--scenarios", "kafka-fairness", "--fairness-items", "300"])
    sizes = sizes_from_args(ns)
    assert (sizes.fairness_items, sizes.fairness_rate, sizes.fairness_seconds) == (300, 20.0, 10.0)
    quick = sizes_from_args(parser.parse_args(["--quick"]))
    assert quick.fairness_items < sizes_from_args(parser.parse_args([])).fairness_items == 50_000
