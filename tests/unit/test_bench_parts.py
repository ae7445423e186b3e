"""The parts of `embedstream bench` around the figures: options, settings, progress lines,
the scale-out group's settling rule, the recorder, /proc CPU and the plots."""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path

import pytest
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import ConfigError
from embedstream.testing import FakeClock, RecordingBackend
from embedstream.tools.bench import BenchError
from embedstream.tools.bench.app import engine_settings, latency_model
from embedstream.tools.bench.context import ScenarioResult
from embedstream.tools.bench.figures import LatencyModel, Percentiles, Row
from embedstream.tools.bench.options import (
    FULL,
    QUICK,
    SCENARIOS,
    add_cli_arguments,
    sizes_from_args,
)
from embedstream.tools.bench.processes import process_cpu_s, simulator_args
from embedstream.tools.bench.recorder import TimedBackend
from embedstream.tools.bench.scaleout import member_environment, settled
from embedstream.tools.progress import PlainSteps, TerminalSteps, make_step_progress
from embedstream.tools.top.readings import PartitionLag, Snapshot


def parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="embedstream bench", exit_on_error=False)
    add_cli_arguments(parser)
    return parser.parse_args(list(args))


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("given", "chosen"),
    [
        ("closed", ("closed",)),
        ("open,closed", ("closed", "open")),  # always in running order
        ("in-process", ("closed", "backlog", "open")),
        (
            "kafka,closed",
            ("closed", "kafka-backlog", "kafka-poisson", "kafka-flood", "kafka-floor"),
        ),
        ("all", SCENARIOS),
        ("none", ()),
    ],
)
def test_scenarios_are_chosen_by_name_or_group(given: str, chosen: tuple[str, ...]) -> None:
    assert parse("--scenarios", given).scenarios == chosen


def test_an_unknown_scenario_is_named() -> None:
    with pytest.raises(argparse.ArgumentError, match="unknown scenario 'clsoed'"):
        parse("--scenarios", "clsoed")


def test_sizes_default_to_the_issues_and_quick_is_smaller_and_flags_win() -> None:
    assert sizes_from_args(parse()) == FULL
    assert FULL.backlog_items == 100_000 and FULL.callers == 50 and FULL.rates == (1000, 3000)
    quick = sizes_from_args(parse("--quick"))
    assert quick == QUICK and quick.backlog_items < FULL.backlog_items
    mine = sizes_from_args(parse("--quick", "--backlog-items", "7", "--rates", "10", "20"))
    assert mine.backlog_items == 7 and mine.rates == (10.0, 20.0) and mine.seconds == 2.0


@pytest.mark.parametrize(
    "args", [["--capacity", "0"], ["--base-ms", "-1"], ["--seconds", "nan"], ["--rpm", "inf"]]
)
def test_a_bad_number_is_refused_by_the_parser(args: list[str]) -> None:
    with pytest.raises(argparse.ArgumentError):
        parse(*args)


def test_the_latency_model_comes_from_the_options() -> None:
    model = latency_model(parse("--base-ms", "10", "--capacity", "4", "--tpm", "60000"))
    assert model == LatencyModel(base_ms=10.0, capacity=4, tpm=60_000.0)


# --------------------------------------------------------------------------- settings


def test_engine_settings_default_to_what_reaching_the_bound_takes() -> None:
    settings = engine_settings(parse("--capacity", "6"), latency_model(parse("--capacity", "6")))
    assert settings.max_batch_size == 2048
    assert settings.max_batch_tokens == 300_000
    assert settings.max_concurrency == 6
    assert settings.buffered_items_limit == 2 * 6 * 2048  # two full calls per slot
    assert settings.max_wait_ms == 50.0  # the library's default


def test_engine_settings_flags_and_config_file_win_over_the_bench_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBEDSTREAM_MAX_WAIT_MS", "1")  # the environment is not read
    config = tmp_path / "mine.toml"
    config.write_text("max_batch_size = 128\nscale_factor = 10.0\n")
    ns = parse("--config", str(config), "--scale-factor", "20", "--max-concurrency", "3")
    settings = engine_settings(ns, LatencyModel())
    assert settings.max_batch_size == 128  # the file's, not the bench's 2048
    assert settings.scale_factor == 20.0  # the flag's, over the file's
    assert settings.max_concurrency == 3
    assert settings.max_wait_ms == 50.0


def test_a_bad_engine_setting_names_itself() -> None:
    with pytest.raises(ConfigError, match="max_wait_ms"):
        engine_settings(parse("--max-wait-ms", "-3"), LatencyModel())


def test_a_bad_latency_model_is_a_bench_error() -> None:
    ns = parse()
    ns.base_ms = float("nan")  # past the parser, as a caller of the function could pass
    with pytest.raises(BenchError, match="base_ms"):
        latency_model(ns)


def test_member_environment_carries_the_settings_and_nothing_secret() -> None:
    settings = engine_settings(parse("--max-wait-ms", "7"), LatencyModel())
    env = member_environment(settings)
    assert env["EMBEDSTREAM_MAX_WAIT_MS"] == "7.0"
    assert env["EMBEDSTREAM_MAX_BATCH_SIZE"] == "2048"
    assert env["EMBEDSTREAM_LOG_LEVEL"] == "WARNING"
    assert "EMBEDSTREAM_API_KEY" not in env


def test_simulator_command_line_carries_the_model() -> None:
    model = LatencyModel(base_ms=40.0, per_token_ms=0.02, capacity=8, rpm=3000.0)
    args = simulator_args(model, port=1234, dimensions=256, burst_s=1.0)
    pairs = dict(zip(args[1::2], args[2::2], strict=True))
    assert args[0] == "simulate"
    assert pairs["--port"] == "1234" and pairs["--capacity"] == "8"
    assert float(pairs["--base-ms"]) == 40.0 and float(pairs["--per-token-ms"]) == 0.02
    assert float(pairs["--rate-limit-rpm"]) == 3000.0 and pairs["--rate-limit-burst-s"] == "1.0"
    assert "--rate-limit-rpm" not in simulator_args(
        LatencyModel(), port=1, dimensions=8, burst_s=1.0
    )


# --------------------------------------------------------------------------- progress


def test_plain_steps_write_whole_lines_a_start_some_progress_and_a_summary() -> None:
    clock = FakeClock()
    out = io.StringIO()
    steps = PlainSteps(out, clock=clock, interval_s=5.0)
    steps.begin("backlog 5,000", 5000, "items")
    clock.advance(4.0)
    steps.update(1000)  # too soon for a line
    clock.advance(1.0)
    steps.update(2500)
    steps.end("9,000 items/s")
    steps.close()
    assert out.getvalue().splitlines() == [
        "bench: backlog 5,000 started",
        "bench: backlog 5,000: 2,500 of 5,000 items",
        "bench: backlog 5,000: 9,000 items/s",
    ]


def test_steps_are_bars_on_a_terminal_only(tmp_path: Path) -> None:
    with (tmp_path / "err").open("w") as fh:
        assert isinstance(make_step_progress(fh), PlainSteps)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    bar = make_step_progress(Tty())
    try:
        assert isinstance(bar, TerminalSteps)
        bar.begin("closed 50", 2.0, "s")
        bar.update(1.0)
        bar.end("done")
    finally:
        bar.close()


# --------------------------------------------------------------------------- scale-out


def snapshot(*partitions: int, ready: bool = True, topic: str = "t.low") -> Snapshot:
    lags = tuple(PartitionLag(topic, p, "low") for p in partitions)
    return Snapshot(partitions=lags, ready=ready)


@pytest.mark.parametrize(
    ("snapshots", "expected"),
    [
        ([snapshot(0, 1, 2, 3)], True),
        ([snapshot(0, 1), snapshot(2, 3)], True),
        ([snapshot(0, 1), snapshot(2)], False),  # partition 3 not held yet
        ([snapshot(0, 1, 2, 3), snapshot()], False),  # a member without partitions
        ([snapshot(0, 1, 2), snapshot(2, 3)], False),  # 2 still reported by its old owner
        ([snapshot(0, 1), snapshot(2, 3, ready=False)], False),
        ([snapshot(0, 1), None], False),  # a member not scraped yet
        ([snapshot(0, 1), snapshot(2, 3, topic="t.high")], False),  # only the backlog's topic
    ],
)
def test_a_group_is_settled_when_every_member_holds_its_share(
    snapshots: list[Snapshot | None], expected: bool
) -> None:
    assert settled(snapshots, "t.low", 4) is expected


# --------------------------------------------------------------------------- recorder, CPU


async def test_timed_backend_records_each_call_and_forgets_on_restart() -> None:
    clock = FakeClock()

    class Slow(RecordingBackend):
        async def embed(self, call: BatchCall) -> BatchOutcome:
            clock.advance(0.25)
            return await super().embed(call)

    backend = TimedBackend(Slow(), clock=clock)
    await backend.embed(BatchCall("m", ["warm"], "float", None))
    backend.restart()
    clock.advance(1.0)
    await backend.embed(BatchCall("m", ["a", "b", "c"], "float", None))
    assert backend.calls == 1 and backend.inputs == 3
    assert backend.timeline() == [(1.0, 3)]
    assert backend.sizes_and_latencies_ms() == [(3, 250.0)]


async def test_timed_backend_records_a_failed_call_and_lets_its_error_through() -> None:
    class Failing(RecordingBackend):
        async def embed(self, call: BatchCall) -> BatchOutcome:
            raise RuntimeError("down")

    backend = TimedBackend(Failing(), clock=FakeClock())
    with pytest.raises(RuntimeError, match="down"):
        await backend.embed(BatchCall("m", ["a"], "float", None))
    assert backend.calls == 1 and backend.sizes_and_latencies_ms() == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_process_cpu_grows_with_work() -> None:
    before = process_cpu_s(os.getpid())
    assert before is not None
    total = 0
    while (process_cpu_s(os.getpid()) or 0.0) - before < 0.05:
        total += sum(range(10_000))
    assert process_cpu_s(2**22 + 12345) is None  # no such process


# --------------------------------------------------------------------------- plots


def result(kind: str, rate: float | None, pct: float) -> ScenarioResult:
    row = Row(
        scenario=f"{kind} {rate}",
        kind=kind,
        items=int(pct * 10),
        seconds=1.0,
        bound_per_s=1000.0,
        latency=Percentiles(40.0, 60.0, 80.0),
        calls=3,
        inputs=30,
        client_cpu_s=0.1,
        provider_cpu_s=0.1,
        offered_per_s=rate,
    )
    return ScenarioResult(row, timeline=[(0.0, 10), (0.1, 20)])


def test_plots_are_written_as_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from embedstream.tools.bench.plots import write_plots

    results = [
        result("open", 1000.0, 70.0),
        result("open", 3000.0, 40.0),
        result("backlog", None, 90.0),
    ]
    written = write_plots(tmp_path / "plots", results)
    assert sorted(p.name for p in written) == [
        "batch_size_over_time.png",
        "latency_vs_load.png",
        "throughput_vs_bound.png",
    ]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_without_data_for_them_are_left_out(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from embedstream.tools.bench.plots import write_plots

    written = write_plots(tmp_path, [result("backlog", None, 90.0)])  # no open loop
    assert sorted(p.name for p in written) == [
        "batch_size_over_time.png",
        "throughput_vs_bound.png",
    ]
