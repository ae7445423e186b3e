"""The bench's child processes: the simulated provider and `embedstream run` processors.

Each runs as `python -m embedstream ...` of this interpreter, so its CPU is not the client's,
and is read from /proc (Linux; None elsewhere). Output goes to a log file next to the run,
whose last lines are quoted when a child fails to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from embedstream.tools.bench import BenchError
from embedstream.tools.bench.figures import LatencyModel
from embedstream.tools.embedded import die_with_parent, free_port

START_TIMEOUT_S = 30.0


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, from /proc; None if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment without any EMBEDSTREAM_* variable (a child gets exactly the
    settings it is given), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
    env.update(extra)
    return env


class Child:
    """One `python -m embedstream ARGS` process with its output in ``log_path``."""

    def __init__(self, args: Sequence[str], log_path: Path, env: Mapping[str, str]) -> None:
        self.args = list(args)
        self.log_path = log_path
        self._env = dict(env)
        self._process: subprocess.Popen[bytes] | None = None
        self._cpu_at_exit: float | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("not started")
        return self._process.pid

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "embedstream", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env,
                preexec_fn=die_with_parent,
            )

    def exited(self) -> bool:
        return self._process is not None and self._process.poll() is not None

    def cpu_s(self) -> float | None:
        if self._process is None:
            return None
        return process_cpu_s(self._process.pid) if not self.exited() else self._cpu_at_exit

    def log_tail(self, lines: int = 3) -> str:
        with contextlib.suppress(OSError):
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
            return " | ".join(line.strip() for line in tail)
        return ""

    def terminate(self) -> None:
        """SIGTERM without waiting: a processor stops fetching, drains and commits."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        self._cpu_at_exit = process_cpu_s(process.pid)
        process.terminate()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        process = self._process
        if process is None:
            return
        self.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    async def wait_for_http(self, url: str, *, ok: Sequence[int] = (200,)) -> None:
        """Until ``url`` answers one of ``ok``; a BenchError naming the child if it exits or
        does not answer within START_TIMEOUT_S."""
        deadline = time.monotonic() + START_TIMEOUT_S
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while time.monotonic() < deadline:
                if self.exited():
                    raise BenchError(
                        f"`embedstream {self.args[0]}` exited at start: {self.log_tail()} "
                        f"(log: {self.log_path})"
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url) as response:
                        if response.status in ok:
                            return
                await asyncio.sleep(0.1)
        raise BenchError(
            f"`embedstream {self.args[0]}` did not answer {url} within {START_TIMEOUT_S:g} s "
            f"(log: {self.log_path})"
        )


def simulator_args(model: LatencyModel, *, port: int, dimensions: int, burst_s: float) -> list[str]:
    """The `embedstream simulate` command line of ``model``."""
    args = [
        "simulate",
        *("--port", str(port)),
        *("--base-ms", repr(model.base_ms)),
        *("--per-token-ms", repr(model.per_token_ms)),
        *("--per-input-ms", repr(model.per_input_ms)),
        *("--capacity", str(model.capacity)),
        *("--dimensions", str(dimensions)),
    ]
    if model.rpm > 0 or model.tpm > 0:
        args += [
            *("--rate-limit-rpm", repr(model.rpm)),
            *("--rate-limit-tpm", repr(model.tpm)),
            *("--rate-limit-burst-s", repr(burst_s)),
        ]
    return args


class SimulatorProcess:
    """`embedstream simulate` with the bench's latency model, in a process of its own."""

    def __init__(self, model: LatencyModel, *, dimensions: int, burst_s: float, log_dir: Path):
        self.port = free_port()
        args = simulator_args(model, port=self.port, dimensions=dimensions, burst_s=burst_s)
        self._child = Child(args, log_dir / "simulator.log", child_environment({}))

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    async def start(self) -> None:
        self._child.start()
        await self._child.wait_for_http(f"{self.root_url}/healthz")

    def stop(self) -> None:
        self._child.stop(timeout_s=5.0)

    def cpu_s(self) -> float | None:
        return self._child.cpu_s()

    async def stats(self) -> dict[str, Any]:
        """The simulator's counters (calls, inputs, tokens, errors, rejected_429, ...)."""
        return await self._request("GET", "/stats")

    async def reset_stats(self) -> None:
        await self._request("POST", "/admin/reset-stats")

    async def _request(self, method: str, path: str) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.root_url + path) as response,
        ):
            doc: dict[str, Any] = await response.json()
            return doc


class ProcessorProcess:
    """`embedstream run` with settings given as EMBEDSTREAM_* variables and its own metrics
    port, which the bench scrapes for readiness, assignment and results."""

    def __init__(self, name: str, settings_env: Mapping[str, str], log_dir: Path) -> None:
        self.metrics_port = free_port()
        env = child_environment(
            {**settings_env, "EMBEDSTREAM_METRICS_PORT": str(self.metrics_port)}
        )
        self._child = Child(["run"], log_dir / f"{name}.log", env)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int:
        return self._child.pid

    def start_nowait(self) -> None:
        self._child.start()

    async def wait_started(self) -> None:
        """Until /healthz answers (from process start; readiness comes with the group join)."""
        await self._child.wait_for_http(f"http://127.0.0.1:{self.metrics_port}/healthz")

    def terminate(self) -> None:
        self._child.terminate()

    def exited(self) -> bool:
        return self._child.exited()

    def log_tail(self) -> str:
        return self._child.log_tail()

    def cpu_s(self) -> float | None:
        return self._child.cpu_s()

    def stop(self) -> None:
        self._child.stop()
