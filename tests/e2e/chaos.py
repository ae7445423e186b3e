"""A typed harness for chaos tests of delivery guarantees, in the style of Kafka's system tests.

Real `embedstream run` processes (subprocesses that can be SIGKILLed, SIGTERMed, SIGSTOPped),
a feeder publishing requests at a steady rate while faults happen, a watcher of the group's
committed offsets, and a drain helper that waits for the group to catch up and then compares
the whole output with the input set through :func:`embedstream.tools.verify.app.verify`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from embedstream.settings import load_settings
from embedstream.settings.derived import ITEM_RESIDENT_BYTES, buffered_items_bound

DEFAULT_MODEL = load_settings(env={}).model
ASSIGNED = "partitions assigned:"
# Lines that betray an unhandled error in a processor's log.
UNHANDLED = ("Traceback", "Task exception was never retrieved")
# Lines exactly-once members must never log: aiokafka's assertion when a broken transactional
# producer is reused, errors nobody handled, clients never closed.
UNTIDY = ("Invalid state transition", "Future exception was never retrieved", "Unclosed")
LOG_TAIL_CHARS = 6000
NOISE = "HTTP Request:"  # httpx logs every call at INFO
REPO = Path(__file__).resolve().parents[2]  # processors run this working tree's `stream`


def figures(title: str, **values: object) -> str:
    """One line of test figures, printed so that `pytest -s` shows them."""
    text = f"[chaos] {title}: " + ", ".join(f"{k}={v}" for k, v in values.items())
    print(text, flush=True)
    return text


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class ProcessorOptions:
    """What every processor of a test shares; `ProcessorProcess` adds name and metrics port."""

    bootstrap: str
    prefix: str
    group: str
    base_url: str
    # The buffer's byte bound, from which its item bound is derived (1 KiB an item): 500 items.
    max_buffered_bytes: int = 500 * ITEM_RESIDENT_BYTES
    max_event_bytes: int = 4096  # the feeders' requests are far smaller
    max_batch_size: int = 64
    max_concurrency: int = 4
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    commit_interval_ms: int = 200
    extra_args: tuple[str, ...] = ()

    @property
    def buffered_items(self) -> int:
        """The most items a processor holds: the bound derived from these settings."""
        return buffered_items_bound(
            self.max_batch_size, self.max_concurrency, self.max_buffered_bytes, ITEM_RESIDENT_BYTES
        )

    @property
    def in_flight_items(self) -> int:
        """Most items inside embeddings calls at once."""
        return self.max_concurrency * self.max_batch_size


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: have the kernel SIGKILL it when the test process dies,
    so a test stopped by its timeout leaves no processor consuming from the shared broker."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessorProcess:
    """One `embedstream run` subprocess. Every incarnation appends to the same log file."""

    def __init__(
        self, name: str, options: ProcessorOptions, log_dir: Path, *, metrics_port: int = 0
    ) -> None:
        self.name = name
        self.options = options
        self.metrics_port = metrics_port
        self.log_path = log_dir / f"{name}.log"
        self.starts = 0
        self.exit_codes: list[int] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._log_offset = 0  # where the current incarnation's output begins

    def command(self) -> list[str]:
        o = self.options
        return [
            sys.executable, "-m", "embedstream.cli", "run",
            "--bootstrap-servers", o.bootstrap,
            "--topic-prefix", o.prefix,
            "--group-id", o.group,
            "--client-id", f"chaos-{self.name}",
            "--base-url", o.base_url,
            "--metrics-port", str(self.metrics_port),
            "--session-timeout-ms", str(o.session_timeout_ms),
            "--heartbeat-interval-ms", str(o.heartbeat_interval_ms),
            "--commit-interval-ms", str(o.commit_interval_ms),
            "--max-buffered-bytes", str(o.max_buffered_bytes),
            "--max-event-bytes", str(o.max_event_bytes),
            "--max-batch-size", str(o.max_batch_size),
            "--max-concurrency", str(o.max_concurrency),
            "--fetch-max-wait-ms", "50",
            "--max-wait-ms", "20",
            *o.extra_args,
        ]  # fmt: skip

    async def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        # Hermetic: no EMBEDSTREAM_* or OPENAI_* setting of the caller leaks in.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDSTREAM_", "OPENAI_"))}
        env["PYTHONUNBUFFERED"] = "1"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(
                f"===== {self.name} start #{self.starts} at {time.time():.3f} =====\n".encode()
            )
            log.flush()
            self._log_offset = log.tell()
            self._proc = await asyncio.create_subprocess_exec(
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=REPO,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    def _signal(self, sig: signal.Signals) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            raise RuntimeError(f"{self.name} is not running")
        self._proc.send_signal(sig)
        return self._proc

    async def sigkill(self) -> int:
        proc = self._signal(signal.SIGKILL)
        code = await asyncio.wait_for(proc.wait(), 30)
        self.exit_codes.append(code)
        return code

    async def sigterm(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, then wait (bounded) for the exit code. A process still running after
        `timeout_s` is SIGKILLed and the test fails."""
        return await self.stop_with(signal.SIGTERM, timeout_s)

    async def stop_with(self, sig: signal.Signals, timeout_s: float = 60.0) -> int:
        """Send `sig`, then wait (bounded) for the exit code, as `sigterm`."""
        proc = self._signal(sig)
        try:
            code = await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            # Where it waits, in the log the failure shows: every task's stack.
            proc.send_signal(signal.SIGUSR1)
            await asyncio.sleep(2.0)
            await self.sigkill()
            raise AssertionError(
                f"{self.name} did not exit within {timeout_s:g}s of {sig.name}\n{self.log_tail()}"
            ) from None
        self.exit_codes.append(code)
        return code

    def send_signal(self, sig: signal.Signals) -> None:
        """Send `sig` and return at once."""
        self._signal(sig)

    def sigstop(self) -> None:
        self._signal(signal.SIGSTOP)

    def sigcont(self) -> None:
        self._signal(signal.SIGCONT)

    def rss_bytes(self) -> int | None:
        """Resident set size now (VmRSS), or None when the process is gone."""
        if not self.alive or self.pid is None:
            return None
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        match = re.search(r"^VmRSS:\s+(\d+)\s+kB", status, re.MULTILINE)
        return int(match.group(1)) * 1024 if match else None

    # -- logs -------------------------------------------------------------------------------

    def log_text(self, *, current_only: bool = False) -> str:
        try:
            with self.log_path.open("rb") as log:
                if current_only:
                    log.seek(self._log_offset)
                return log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The end of the log, without the HTTP client's line per embeddings call."""
        lines = [line for line in self.log_text().splitlines() if NOISE not in line]
        text = "\n".join(lines)
        return (
            f"--- {self.log_path} (last {chars} chars, {NOISE!r} lines left out) ---\n"
            + (text[-chars:])
        )

    def assignments(self, *, current_only: bool = True) -> list[str]:
        """The "partitions assigned" log lines, one per rebalance this member took part in."""
        return [
            line for line in self.log_text(current_only=current_only).splitlines()
            if ASSIGNED in line
        ]  # fmt: skip

    def unhandled_errors(self) -> list[str]:
        return self.lines_with(UNHANDLED)

    def lines_with(self, markers: Iterable[str]) -> list[str]:
        """Every line of every incarnation's log that contains one of `markers`."""
        found = tuple(markers)
        return [line for line in self.log_text().splitlines() if any(m in line for m in found)]

    async def wait_assigned(
        self, *, count: int = 1, nonempty: bool = False, timeout_s: float = 60.0
    ) -> None:
        """Until the current incarnation has logged `count` assignments (the last one holding
        partitions when `nonempty`). Fails if the process exits meanwhile."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lines = self.assignments()
            if len(lines) >= count and (not nonempty or not lines[-1].rstrip().endswith("[]")):
                return
            if not self.alive:
                raise AssertionError(
                    f"{self.name} exited ({self.returncode}) before joining\n{self.log_tail()}"
                )
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} not assigned within {timeout_s:g}s\n{self.log_tail()}")


class Fleet:
    """The processors of one test. Leaving the `async with` block SIGKILLs whatever still runs
    and, when the block failed, prints every processor's log tail."""

    def __init__(self, options: ProcessorOptions, log_dir: Path) -> None:
        self.options = options
        self.log_dir = log_dir
        self.processes: list[ProcessorProcess] = []

    def add(self, name: str | None = None, *, metrics_port: int = 0) -> ProcessorProcess:
        proc = ProcessorProcess(
            name or f"p{len(self.processes)}", self.options, self.log_dir, metrics_port=metrics_port
        )
        self.processes.append(proc)
        return proc

    async def start(self, count: int) -> list[ProcessorProcess]:
        """Add and start `count` processors, then wait until each has joined the group."""
        started = [self.add() for _ in range(count)]
        for proc in started:
            await proc.start()
        for proc in started:
            await proc.wait_assigned()
        return started

    @property
    def alive(self) -> list[ProcessorProcess]:
        return [p for p in self.processes if p.alive]

    def unhandled_errors(self) -> dict[str, list[str]]:
        return self.lines_with(UNHANDLED)

    def lines_with(self, markers: Iterable[str]) -> dict[str, list[str]]:
        """Per processor, its log lines containing one of `markers` (only those with some)."""
        found = {p.name: p.lines_with(markers) for p in self.processes}
        return {name: lines for name, lines in found.items() if lines}

    async def stop_all(self, timeout_s: float = 60.0) -> list[int]:
        """SIGTERM every running processor, one after another; their exit codes."""
        return [await proc.sigterm(timeout_s) for proc in self.alive]

    def log_paths(self) -> list[Path]:
        return [p.log_path for p in self.processes]

    def log_tails(self, chars: int = LOG_TAIL_CHARS) -> str:
        return "\n".join(p.log_tail(chars) for p in self.processes)

    async def kill_all(self) -> None:
        for proc in self.alive:
            with contextlib.suppress(ProcessLookupError, RuntimeError, TimeoutError):
                await proc.sigkill()

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.kill_all()
        if exc is not None:
            print(f"\n[chaos] processor logs ({self.log_dir}):\n{self.log_tails()}", flush=True)


# --------------------------------------------------------------------------- monitoring
