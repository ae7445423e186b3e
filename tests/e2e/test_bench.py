"""`embedstream bench`'s Kafka scenarios and scale-out on Apache Kafka, small and bounded:
every event gets its result and the figures add up. Nothing here asserts a speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from embedstream.kafka.client.admin import list_topics

# One worker runs them: each checks that no bench.* topic is left, which another bench run
# in parallel would have.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("bench")]

STREAM = Path(__file__).resolve().parents[2] / "stream"


def bench(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STREAM), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "embedstream", "bench", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


async def test_kafka_scenarios_and_scale_out_on_apache_kafka(
    bootstrap: str, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    before = set(await list_topics(bootstrap, "bench."))
    done = bench(
        "--scenarios", "kafka", "--bootstrap", bootstrap,
        "--kafka-items", "400", "--kafka-rate", "200", "--kafka-seconds", "1",
        "--flood-items", "400", "--floor-items", "400",
        "--scale-out", "--processors", "1", "2", "--scale-out-items", "400",
        "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    backlog, poisson, alone, flooded, high, floor, ours = report["rows"]
    assert backlog["kind"] == "kafka-backlog"
    assert (backlog["items"], backlog["failed"]) == (400, 0)
    assert backlog["inputs"] >= 400 and backlog["calls"] >= 1  # every event was embedded
    assert backlog["latency"] is None  # a drain has no per-item latency
    assert poisson["kind"] == "kafka-poisson" and poisson["offered_per_s"] == 200
    assert poisson["failed"] == 0 and poisson["items"] > 0
    assert poisson["latency"]["p50_ms"] <= poisson["latency"]["p99_ms"]
    assert (alone["kind"], flooded["kind"]) == ("kafka-flood-low", "kafka-flood-low")
    assert (alone["items"], flooded["items"], alone["failed"]) == (400, 400, 0)
    assert high["kind"] == "kafka-flood-high" and "% of alone)" in flooded["scenario"]
    assert (floor["kind"], floor["items"], ours["items"]) == ("kafka-floor", 400, 400)
    assert floor["client_cpu_s"] > 0 and "x floor)" in ours["scenario"]
    one, two = report["scale_out"]
    assert (one["processors"], two["processors"]) == (1, 2)
    for row in (one, two):
        assert row["items"] == 400 and row["seconds"] > 0
        assert row["processor_cpu_s"] > 0 and row["cpu_s_per_1000"] > 0
        assert row["inputs"] >= 400  # the members' own batch histograms, in the window
    assert "scale-out: one group draining a backlog" in done.stdout
    # Every scenario deleted its topics: none is left that was not there before the run (an
    # interrupted bench run elsewhere on the broker may have left its own).
    assert set(await list_topics(bootstrap, "bench.")) <= before


async def test_documents_scenario_on_apache_kafka(bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = bench(
        "--scenarios", "documents", "--bootstrap", bootstrap, "--docs", "10", "--json", str(out)
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    first, edited, plain = json.loads(out.read_text())["rows"]
    assert {first["kind"], edited["kind"], plain["kind"]} == {"documents"}
    assert first["failed"] == edited["failed"] == plain["failed"] == 0
    assert first["items"] >= 10 * 20 and plain["items"] == first["items"]
    # One paragraph edited in one document of ten: most chunks were cache answers.
    assert edited["inputs"] < first["inputs"] / 2
    assert "% of the first pass" in edited["scenario"] and "x items/s" in plain["scenario"]
    # Its own topics are deleted (a kafka-flood run's were once seen left: see the note).
    assert [t for t in await list_topics(bootstrap, "bench.") if ".documents." in t] == []


async def test_fairness_scenario_on_apache_kafka(bootstrap: str, tmp_path: Path) -> None:
    """A tiny kafka-fairness: every row is there and its ratios are computed (none of them
    is asserted: a speed)."""
    out = tmp_path / "bench.json"
    done = bench(
        "--scenarios", "kafka-fairness", "--bootstrap", bootstrap, "--fairness-items", "300",
        "--fairness-seconds", "1", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    main = [row for row in rows if row["kind"] != "kafka-stage"]
    b_alone, a_alone, a_shares, b_shares, a_fifo, b_fifo = main
    pair = ["kafka-fairness-drain", "kafka-fairness-trickle"]
    assert [row["kind"] for row in main] == [*reversed(pair), *pair, *pair]
    for a in (a_alone, a_shares, a_fifo):
        assert (a["items"], a["failed"]) == (300, 0) and a["inputs"] >= 300
    for b in (b_alone, b_shares, b_fifo):
        assert b["items"] > 0 and b["latency"]["p50_ms"] <= b["latency"]["p99_ms"]
    assert "shares (" in a_shares["scenario"] and "% of alone)" in a_shares["scenario"]
    assert "x alone)" in b_shares["scenario"] and "calls FIFO" in b_fifo["scenario"]
    stages = {row["scenario"].rsplit(": ", 1)[1] for row in rows if row["kind"] == "kafka-stage"}
    assert {"published -> fetched", "call_start -> call_done", "written -> acked"} <= stages
    assert [t for t in await list_topics(bootstrap, "bench.") if ".fair." in t] == []


async def test_mixed_scenario_on_apache_kafka(bootstrap: str, tmp_path: Path) -> None:
    """A tiny kafka-mixed (its path on a real broker): both drains finish, every high item is
    acknowledged in each, and the high requests' stages are there (their times are not
    asserted: a speed)."""
    out = tmp_path / "bench.json"
    done = bench(
        "--scenarios", "kafka-mixed", "--bootstrap", bootstrap, "--mixed-items", "400",
        "--timeline", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    alone, mixed, whole = (row for row in rows if row["kind"] != "kafka-stage")
    assert (alone["kind"], mixed["kind"], whole["kind"]) == (
        "kafka-mixed-high", "kafka-mixed-high", "kafka-mixed-drain"
    )  # fmt: skip
    assert (alone["items"], alone["failed"], mixed["items"], mixed["failed"]) == (40, 0, 40, 0)
    assert (whole["items"], whole["failed"]) == (400, 0) and whole["inputs"] >= 400
    assert "x alone" in mixed["scenario"] and "join " in mixed["note"]
    stages = {row["scenario"].rsplit(": ", 1)[1] for row in rows if row["kind"] == "kafka-stage"}
    assert {"published -> fetched", "fetched -> call_start", "written -> acked"} <= stages
    assert [t for t in await list_topics(bootstrap, "bench.") if ".mixed." in t] == []


async def test_online_scenario_callers_in_a_process_of_their_own(
    bootstrap: str, tmp_path: Path
) -> None:
    """A tiny `online` run: `embedstream run` drains in a process of its own (the online lane
    on, for the lane's arm: `serve` and the processor as its lane processes); the callers (a
    child process) got an answer to every request they sent, in both arms, and the drains
    took every low event."""
    out = tmp_path / "bench.json"
    done = bench(
        "--scenarios", "online", "--bootstrap", bootstrap, "--online-items", "2000",
        "--online-rate", "40", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    alone, lane_drain, lane, direct_drain, direct, front = rows
    assert [r["items"] for r in (alone, lane_drain, direct_drain)] == [2000] * 3
    for callers in (lane, direct):
        assert callers["kind"] == "online-callers" and callers["failed"] == 0
        assert callers["items"] > 0 and callers["latency"]["p50_ms"] > 0
    assert lane_drain["calls"] > 0 and lane_drain["client_cpu_s"] > 0
    assert front["kind"] == "online-front"
