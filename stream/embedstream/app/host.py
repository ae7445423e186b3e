"""`embedstream run` on one host: each lane in a process of its own, one command supervising
them. A latency lane never shares an interpreter with bulk work, and the operating system
schedules the processes; they share one provider budget through the supervisor's ledger
(`engine/budget_socket.py`, no Redis needed) or, with ``budget_url``, the fleet's.

The children are `embedstream serve` (the online lane, on ``http_port``) and one or more
`embedstream run` processors with the online lane off, each given this command's settings
(its flags and ``--config`` file, and the environment it inherits) plus what the supervisor
decides: the budget's URL, a loopback metrics port of its own, which input lanes it reads.
Their log lines come out of this process, each marked with its lane process's name.

What the supervisor does: restarts a child that crashed, with a backoff (`core/restarts.py`),
and gives up, ending with status 2, on one that fails at start with a mistake; on SIGTERM or
SIGINT asks every child to drain and stop (a second signal: at once), waits for them and
ends with one status (0 when each ended 0); serves one /metrics (its children's, labelled by
``process``), one /readyz (ready when every child is) and /healthz on ``metrics_port``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from embedstream.core.restarts import GiveUp, RestartPolicy
from embedstream.engine.budget_socket import LedgerServer
from embedstream.errors import ConfigError
from embedstream.ops.gathered import ChildEndpoint, GatheredChildren, HostMetrics
from embedstream.ops.local import die_with_parent, free_port
from embedstream.ops.server import OpsServer
from embedstream.settings import Settings
from embedstream.settings.commands import RUN_SETTINGS, SERVE_SETTINGS
from embedstream.settings.flags import as_flags

log = logging.getLogger(__name__)

STOP_GRACE_S = 20.0  # beyond a child's drain_timeout_s, before it is SIGKILLed


@dataclass(frozen=True, slots=True)
class LaneChild:
    """One lane process: its name (the ``process`` label, the log marker), the command
    and its arguments (the metrics port is chosen at each start)."""

    name: str
    command: str
    args: tuple[str, ...]


def supervises(settings: Settings) -> bool:
    """Whether `embedstream run` runs lane processes rather than being one processor."""
    return bool(settings.http_port) or (settings.high_process and settings.input_lanes == "all")


def lane_children(
    settings: Settings, given: Mapping[str, Any], config: Path | None, budget_url: str
) -> list[LaneChild]:
    """The lane processes ``settings`` ask for: the online lane when ``http_port`` is set,
    and a processor, or with ``high_process`` a high and a bulk one. ``given``: the flags
    this command was given, passed on."""
    common = ["--config", str(config)] if config is not None else []
    children = []
    own = ["--metrics-host", "127.0.0.1", "--budget-url", budget_url]
    if settings.http_port:
        serve = [*common, *as_flags(given, SERVE_SETTINGS), *own]
        children.append(LaneChild("online", "serve", tuple(serve)))
    run = [*common, *as_flags(given, RUN_SETTINGS), "--http-port", "0", "--no-high-process"]
    lanes = {"high": "high", "bulk": "bulk"} if settings.high_process else {"processor": "all"}
    for name, input_lanes in lanes.items():
        children.append(LaneChild(name, "run", (*run, *own, "--input-lanes", input_lanes)))
    return children


class ChildProcess:
    """One supervised lane process; every start of it relays its output as this process's."""

    def __init__(self, spec: LaneChild, json_logs: bool) -> None:
        self.spec = spec
        self.endpoint = ChildEndpoint(spec.name, 0)  # its metrics port: a new one each start
        self._json_logs = json_logs
        self._process: asyncio.subprocess.Process | None = None
        self._relay: asyncio.Task[None] | None = None
        self.started_at = 0.0
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        self.started_at = time.monotonic()
        self.endpoint.port = free_port()
        args = (*self.spec.args, "--metrics-port", str(self.endpoint.port))
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", self.spec.command, *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # Its own session: a terminal's Ctrl-C reaches the supervisor alone, which passes
            # it on once (twice would cut the child's drain short).
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        assert self._process.stdout is not None
        self._relay = asyncio.create_task(self._relay_lines(self._process.stdout))

    async def wait(self) -> int:
        assert self._process is not None
        status = await self._process.wait()
        if self._relay is not None:
            await self._relay  # its last lines (why it ended) before anything else is said
        return status

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running:
            assert self._process is not None
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(sig)

    async def _relay_lines(self, stream: asyncio.StreamReader) -> None:
        name = self.spec.name
        out = sys.stderr.buffer
        while line := await stream.readline():
            if self._json_logs and line.startswith(b"{"):
                with contextlib.suppress(orjson.JSONDecodeError):
                    line = orjson.dumps({**orjson.loads(line), "process": name}) + b"\n"
                    out.write(line)
                    continue
            out.write(b"[" + name.encode() + b"] " + line)
            out.flush()


class HostSupervisor:
    def __init__(
        self,
        settings: Settings,
        children: Sequence[LaneChild],
        ledger: LedgerServer | None = None,
        policy: RestartPolicy | None = None,
    ) -> None:
        self._settings = settings
        self._children = [ChildProcess(c, settings.log_format == "json") for c in children]
        self._ledger = ledger
        self._policy = policy or RestartPolicy()
        self._gathered = GatheredChildren([child.endpoint for child in self._children])
        self.metrics = HostMetrics(self._gathered, [c.name for c in children])
        self._ops = (
            OpsServer(self.metrics, self._readiness, self._before_scrape)
            if settings.metrics_port
            else None
        )
        self._stopping = asyncio.Event()
        self._signals = 0
        self._gave_up: GiveUp | None = None

    def stop(self) -> None:
        """Ask every child to drain and stop; called again, to stop at once."""
        self._signals += 1
        self._stopping.set()
        for child in self._children:
            child.signal(signal.SIGTERM)

    def forward(self, sig: signal.Signals) -> None:
        for child in self._children:
            child.signal(sig)

    async def run(self) -> int:
        """Until every child has ended after a stop (or a child failed for good); the
        host's exit status."""
        s = self._settings
        if self._ledger is not None:
            await self._ledger.start()
        try:
            if self._ops is not None:
                await self._ops.start(s.metrics_host, s.metrics_port)
            for child in self._children:
                await child.start()
                self.metrics.set_up(child.spec.name, True)
            watchers = [asyncio.create_task(self._watch(c)) for c in self._children]
            statuses = await asyncio.gather(*watchers)
        finally:
            if self._ops is not None:
                await self._ops.stop()
            await self._gathered.close()
            if self._ledger is not None:
                await self._ledger.stop()
        if self._gave_up is not None:
            return self._gave_up.status
        return next((status for status in statuses if status != 0), 0)

    async def _watch(self, child: ChildProcess) -> int:
        name = child.spec.name
        while True:
            status = await self._wait_or_kill(child)
            if self._stopping.is_set():
                return status
            decision = self._policy.after_exit(status, child.started_at, time.monotonic())
            self.metrics.set_up(name, False)
            if isinstance(decision, GiveUp):
                log.error("lane process %s failed for good: %s; stopping", name, decision.reason)
                self._gave_up = decision
                self.stop()
                return status
            log.error("lane process %s ended (status %d); restarting it in %.1fs",
                      name, status, decision.in_s)  # fmt: skip
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), decision.in_s)
            if self._stopping.is_set():
                return status
            await child.start()
            self.metrics.count_restart(name)
            self.metrics.set_up(name, True)

    async def _wait_or_kill(self, child: ChildProcess) -> int:
        """The child's exit status; once stopping, SIGKILL after its drain time and a grace."""
        waiting = asyncio.ensure_future(child.wait())
        await asyncio.wait({waiting, asyncio.ensure_future(self._stopping.wait())},
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        if not waiting.done():
            grace = self._settings.drain_timeout_s + STOP_GRACE_S
            done, _ = await asyncio.wait({waiting}, timeout=grace)
            if not done:
                log.error("lane process %s did not stop within %.0fs; killing it",
                          child.spec.name, grace)  # fmt: skip
                child.signal(signal.SIGKILL)
        return await waiting

    async def _readiness(self) -> Any:
        return await self._gathered.readiness()

    async def _before_scrape(self) -> None:
        """The children's families, and the host's readiness as of now (a scraper reads
        `embedstream_ready` without asking /readyz)."""
        ready, _ = await asyncio.gather(
            self._gathered.readiness(), self._gathered.refresh_metrics()
        )
        self.metrics.set_ready(ready.ready)


async def run_host(settings: Settings, given: Mapping[str, Any], config: Path | None) -> int:
    """`embedstream run` with lanes in processes of their own: until SIGINT/SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="embedstream-") as folder:
        ledger = None
        budget_url = settings.budget_url
        if not budget_url:  # one host: the supervisor holds the budget
            ledger = LedgerServer(Path(folder) / "budget.sock")
            budget_url = ledger.url
        children = lane_children(settings, given, config, budget_url)
        supervisor = HostSupervisor(settings, children, ledger)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _on_signal, supervisor, sig)
        loop.add_signal_handler(signal.SIGUSR1, supervisor.forward, signal.SIGUSR1)
        names = ", ".join(f"{c.name} ({c.command})" for c in children)
        log.info("embedstream starting its lanes as processes: %s", names)
        try:
            return await supervisor.run()
        except ConfigError:
            supervisor.stop()
            raise
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                loop.remove_signal_handler(sig)


def _on_signal(supervisor: HostSupervisor, sig: signal.Signals) -> None:
    log.info("received %s: the lane processes finish their work, then exit "
             "(again to stop at once)", sig.name)  # fmt: skip
    supervisor.stop()
