"""The benchmarks' view of embedstream as users run it, from outside: `embedstream run` (its
lanes as processes) or `embedstream serve` children, watched through their /metrics and /proc.

Each figure comes from where a user would read it: results per lane from the process's own
/metrics (a supervisor's carries every lane process's), readiness and the partitions each
member holds likewise; CPU from /proc, over the whole process tree (a supervisor and its lane
processes).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path

import aiohttp

from embedstream.errors import env_var
from embedstream.tools.bench import BenchError
from embedstream.tools.bench.processes import process_cpu_s
from embedstream.tools.top.readings import Snapshot, parse_exposition

POLL_S = 0.2


def settings_environment(values: Mapping[str, object]) -> dict[str, str]:
    """EMBEDSTREAM_* variables for ``values`` (None: left out), the log quiet."""
    env = {"EMBEDSTREAM_LOG_LEVEL": "WARNING"}
    env.update({env_var(name): str(value) for name, value in values.items() if value is not None})
    return env


async def scrape(session: aiohttp.ClientSession, url: str) -> Snapshot | None:
    try:
        async with session.get(url) as response:
            return parse_exposition(await response.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def settle(
    session: aiohttp.ClientSession,
    urls: Sequence[str],
    topic: str,
    partitions: int,
    timeout_s: float = 120.0,
) -> None:
    """Until every target is ready and ``topic``'s partitions are all held, none twice."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snaps = await asyncio.gather(*(scrape(session, url) for url in urls))
        if all(s is not None and s.ready for s in snaps):
            held = sorted(
                p.partition
                for s in snaps
                if s is not None
                for p in s.partitions
                if p.topic == topic
            )
            if held == list(range(partitions)):
                return
        await asyncio.sleep(POLL_S)
    raise BenchError(f"the processes did not settle on {topic}'s {partitions} partitions")


async def until_results(
    session: aiohttp.ClientSession,
    urls: Sequence[str],
    lane: str,
    count: int,
    *,
    timeout_s: float,
    alive: Awaitable[None] | None = None,
) -> None:
    """Until the targets count ``count`` results of ``lane`` between them."""
    latest = [0.0] * len(urls)
    deadline = time.monotonic() + timeout_s
    while sum(latest) < count:
        if time.monotonic() > deadline:
            raise BenchError(f"not drained: {sum(latest):,.0f} of {count:,} {lane} results")
        await asyncio.sleep(POLL_S)
        snaps = await asyncio.gather(*(scrape(session, url) for url in urls))
        latest = [
            s.results.get(lane, 0.0) if s is not None else old
            for s, old in zip(snaps, latest, strict=True)
        ]


def child_pids(parent: int) -> list[int]:
    """The processes whose parent is ``parent``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children so far."""
    pids = [pid, *child_pids(pid)]
    return sum(process_cpu_s(p) or 0.0 for p in pids)


def command_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def renice_children(parent: int, marker: str, niceness: int) -> list[int]:
    """Lower the CPU priority of ``parent``'s children whose command line holds ``marker``
    (a lane process's own flag, e.g. ``bulk``); their pids."""
    chosen = [pid for pid in child_pids(parent) if marker in command_of(pid)]
    for pid in chosen:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    return chosen
