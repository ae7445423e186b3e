"""`embedstream bench` as a user runs it, as a subprocess: a short closed loop against the
simulator in a child process prints the table and writes the JSON; mistakes are one line
before anything is measured. Nothing here asserts a speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

STREAM = Path(__file__).resolve().parents[2] / "stream"


def bench(
    *args: str, pythonpath: Path | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
    paths = [str(pythonpath)] if pythonpath else []
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, str(STREAM), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "embedstream", "bench", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("embedstream: error: ")
    assert done.stdout == ""
    return lines[0]


def test_a_quick_closed_loop_prints_the_table_and_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = bench(
        "--quick", "--scenarios", "closed", "--seconds", "1", "--callers", "10",
        "--json", str(out), "--target-p99-ms", "200",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "scenario" in line)
    for column in ("items/s", "% of bound", "P50 ms", "P95 ms", "P99 ms", "calls",
                   "mean batch", "CPU s", "provider CPU s"):  # fmt: skip
        assert column in header
    assert "closed 10 callers" in done.stdout
    assert "X_phys = K*B/L(B) = 12,913 items/s" in done.stdout  # the reference model's bound
    assert "recommended on this latency model (target P99 200 ms)" in done.stdout
    assert "--max-concurrency 8" in done.stdout
    # stderr is no terminal here: plain progress lines, no bar frames.
    assert "bench: closed 10 started" in done.stderr and "\r" not in done.stderr

    report = json.loads(out.read_text())
    [row] = report["rows"]
    assert row["kind"] == "closed" and row["failed"] == 0
    assert row["items"] > 0 and row["calls"] > 0 and row["inputs"] >= row["calls"]
    assert row["bound_per_s"] == pytest.approx(10 / 0.0406)
    assert row["latency"]["p50_ms"] <= row["latency"]["p95_ms"] <= row["latency"]["p99_ms"]
    assert row["provider_cpu_s"] is not None  # the simulator's process, from /proc
    assert len(report["batch_timelines"]["closed 10 callers"]) == row["calls"]
    assert report["bounds"]["x_phys_per_s"] == pytest.approx(12_913, abs=1)
    assert report["recommendations"]["simulated"]["max_concurrency"] == 8
    assert report["engine_settings"]["max_batch_size"] == 2048
    assert report["args"]["api_key"] is None


def test_plots_without_matplotlib_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "matplotlib").mkdir(parents=True)
    (shadow / "matplotlib" / "__init__.py").write_text(
        "raise ImportError('No module named matplotlib')\n"
    )
    done = bench("--plots", str(tmp_path / "plots"), pythonpath=shadow, timeout_s=30)
    line = one_line(done)
    assert "pip install 'embedstream[bench]'" in line
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--max-wait-ms", "-1"], "setting max_wait_ms"),
        (["--json", "/nonexistent-dir/out.json"], "--json"),
    ],
)
def test_a_mistake_is_one_line(args: list[str], words: str) -> None:
    assert words in one_line(bench(*args, timeout_s=30))


def test_help_lists_the_latency_model_with_its_defaults() -> None:
    done = bench("--help", timeout_s=30)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    for words in ("--base-ms", "(default: 40.0)", "--per-token-ms", "(default: 0.02)",
                  "--capacity", "(default: 8)", "--target-p99-ms", "--scale-out"):  # fmt: skip
        assert words in text


async def test_a_real_endpoint_gets_no_more_texts_than_the_budget() -> None:
    """The endpoint here is a simulator that wants a key, standing in for a hosted API."""
    import asyncio

    from embedsim import SimulatorConfig, SimulatorServer

    async with SimulatorServer(SimulatorConfig(base_ms=5.0, auth_key="sk-bench")) as provider:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STREAM), env.get("PYTHONPATH")]))
        env["OPENAI_API_KEY"] = "sk-bench"  # the key's default: never on the command line
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream", "bench", "--scenarios", "none",
            "--endpoint", provider.url, "--budget", "30", "--callers", "4",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(child.communicate(), 120)
        assert child.returncode == 0, stderr.decode()
        assert 0 < provider.stats.inputs <= 30
    text = stdout.decode()
    assert "endpoint closed 4 callers" in text and "endpoint backlog" in text
    assert "endpoint: L(b) fitted to" in text
    assert "recommended on this latency model" not in text  # nothing ran on the simulator
    assert "sk-bench" not in text + stderr.decode()
