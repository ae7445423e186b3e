"""`embedstream run`'s lane processes, piece by piece: which children the settings ask for and
what each is given, when a crashed child is started again (to the second), and how the
children's metrics and readiness become the host's."""

from __future__ import annotations

from pathlib import Path

import pytest
from embedstream.app.host import lane_children, supervises
from embedstream.core.restarts import GiveUp, Restart, RestartPolicy
from embedstream.ops.gathered import (
    ChildEndpoint,
    ChildReadiness,
    GatheredChildren,
    HostMetrics,
    HostReadiness,
)
from embedstream.settings import load_settings
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

URL = "ledger+unix:///tmp/x/budget.sock"


def flags(args: tuple[str, ...]) -> dict[str, str]:
    """The last value of each --flag (argparse's last wins: what the child ends up with)."""
    found: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            found[arg] = args[i + 1]
    return found


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, False),
        ({"http_port": 8080}, True),
        ({"high_process": True}, True),
        ({"high_process": True, "input_lanes": "bulk"}, False),  # a child already
    ],
)
def test_run_supervises_lane_processes_when_it_has_more_than_one(
    values: dict[str, object], expected: bool
) -> None:
    assert supervises(load_settings(env={}, overrides=values)) is expected


def test_the_online_lane_and_a_processor_each_get_the_budget_and_a_metrics_port_of_their_own() -> (
    None
):
    settings = load_settings(env={}, overrides={"http_port": 8080, "max_batch_size": 64})
    given = {"http_port": "8080", "max_batch_size": "64", "bootstrap_servers": "k:9092"}
    online, processor = lane_children(settings, given, Path("app.toml"), URL)
    assert (online.name, online.command) == ("online", "serve")
    assert (processor.name, processor.command) == ("processor", "run")
    served, ran = flags(online.args), flags(processor.args)
    assert served["--budget-url"] == ran["--budget-url"] == URL
    assert served["--config"] == ran["--config"] == "app.toml"
    assert served["--metrics-host"] == ran["--metrics-host"] == "127.0.0.1"
    assert "--metrics-port" not in served and "--metrics-port" not in ran  # one each start
    assert served["--http-port"] == "8080" and ran["--http-port"] == "0"
    assert ran["--input-lanes"] == "all" and ran["--max-batch-size"] == "64"
    assert "--bootstrap-servers" not in served  # serve takes no Kafka setting
    assert ran["--bootstrap-servers"] == "k:9092"
    assert "--no-high-process" in processor.args  # a child never supervises in turn


def test_high_process_splits_the_processor_into_a_high_and_a_bulk_one() -> None:
    settings = load_settings(env={}, overrides={"high_process": True})
    children = lane_children(settings, {"high_process": True}, None, URL)
    assert [(c.name, flags(c.args)["--input-lanes"]) for c in children] == [
        ("high", "high"),
        ("bulk", "bulk"),
    ]
    assert all("--no-high-process" in c.args and "--config" not in c.args for c in children)


def test_a_crashed_child_is_started_again_after_a_doubling_backoff_reset_by_a_long_run() -> None:
    policy = RestartPolicy(first_s=1.0, cap_s=8.0, healthy_after_s=60.0)
    waits = [policy.after_exit(1, started_at=t, now=t + 30.0) for t in (0, 40, 80, 120, 160)]
    assert waits == [Restart(1.0), Restart(2.0), Restart(4.0), Restart(8.0), Restart(8.0)]
    assert policy.after_exit(1, started_at=200.0, now=260.0) == Restart(1.0)  # ran a minute
    assert policy.after_exit(-9, started_at=300.0, now=300.5) == Restart(2.0)  # SIGKILL


def test_a_child_failing_at_start_with_a_mistake_twice_in_a_row_is_given_up_on() -> None:
    policy = RestartPolicy(start_window_s=10.0)
    # once may be a port taken meanwhile: the next start gets another one
    assert policy.after_exit(2, started_at=5.0, now=14.9) == Restart(1.0)
    decision = policy.after_exit(2, started_at=20.0, now=29.9)
    assert isinstance(decision, GiveUp) and decision.status == 2
    assert "status 2 9.9s after start, 2 times in a row" in decision.reason


def test_a_mistake_after_the_start_window_or_after_a_good_run_starts_the_count_again() -> None:
    policy = RestartPolicy(start_window_s=10.0)
    assert policy.after_exit(2, started_at=5.0, now=15.0) == Restart(1.0)  # ran long enough
    assert policy.after_exit(2, started_at=20.0, now=21.0) == Restart(2.0)  # first in a row
    assert policy.after_exit(1, started_at=30.0, now=31.0) == Restart(4.0)  # a crash between
    assert isinstance(policy.after_exit(2, started_at=40.0, now=41.0), Restart)


def test_the_host_is_ready_when_every_lane_process_is_and_says_which_is_not() -> None:
    ready = HostReadiness(
        [ChildReadiness("online", True, ()), ChildReadiness("processor", True, ())]
    )
    assert ready.ready and ready.checks() == {"online": True, "processor": True}
    not_ready = HostReadiness(
        [
            ChildReadiness("online", True, ()),
            ChildReadiness("processor", False, ("broker unreachable",)),
        ]
    )
    assert not not_ready.ready
    assert not_ready.reasons() == ["processor"]
    assert not_ready.messages() == ["processor: broker unreachable"]


def test_the_childrens_families_are_merged_under_a_process_label_and_their_ready_left_out() -> None:
    gathered = GatheredChildren([ChildEndpoint("online", 1), ChildEndpoint("processor", 2)])
    online = (
        "# HELP embedstream_results_total Results.\n# TYPE embedstream_results_total counter\n"
        'embedstream_results_total{lane="online"} 3.0\n'
        "# HELP embedstream_ready Ready.\n# TYPE embedstream_ready gauge\nembedstream_ready 1.0\n"
    )
    processor = (
        "# HELP embedstream_results_total Results.\n# TYPE embedstream_results_total counter\n"
        'embedstream_results_total{lane="low"} 40.0\n'
        "# HELP embedstream_ready Ready.\n# TYPE embedstream_ready gauge\nembedstream_ready 0.0\n"
    )
    gathered._expositions = {"online": online, "processor": processor}
    metrics = HostMetrics(gathered, ["online", "processor"])
    metrics.set_ready(False)
    metrics.count_restart("processor")
    exposed = {
        f.name: f
        for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
    }
    results = {
        (s.labels["lane"], s.labels["process"]): s.value
        for s in exposed["embedstream_results"].samples
        if s.name.endswith("_total")
    }
    assert results == {("online", "online"): 3.0, ("low", "processor"): 40.0}
    assert [s.value for s in exposed["embedstream_ready"].samples] == [0.0]  # the host's own
    restarts = {
        s.labels["process"]: s.value
        for s in exposed["embedstream_lane_process_restarts"].samples
        if s.name.endswith("_total")
    }
    assert restarts == {"online": 0.0, "processor": 1.0}
