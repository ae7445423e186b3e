"""Where a soaking processor's memory goes: one member in this process, under tracemalloc.

    python bench/soak_heap.py --bootstrap 127.0.0.1:39092 [--minutes 10] [--rate 500]
        [--error-rate 0.02] [--rebalance-every-min 2] [--snapshot-every-min 2] [--frames 10]
        [--out heap.json]

The load of bench/soak.py (a feeder at `--rate` requests/s, the simulator answering 500 to
`--error-rate` of the calls, a second `embedstream run` member joining or leaving every
`--rebalance-every-min`), but the member that runs throughout is a processor built in this
process with `run_service`, on the same settings, so that tracemalloc sees its heap. The feeder
and the simulator run in processes of their own: nothing but the processor allocates here.

Every `--snapshot-every-min` it prints this process's resident memory beside what tracemalloc
traces (Python objects; tracemalloc's own overhead apart), the live objects by type, and the
allocation sites that grew most since the first snapshot after `--warmup-min`. Resident memory
rising while the traced memory stays flat is memory Python freed but the allocator kept (or
memory outside Python's allocator); a traced site that keeps growing is a leak to fix.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import logging
import multiprocessing
import re
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the chaos harness of the tests: processes, feeder

from embedstream.app.processor import build_service, default_backend  # noqa: E402
from embedstream.kafka.client.admin import create_topics, load_topic_specs  # noqa: E402
from embedstream.settings import load_settings  # noqa: E402
from embedstream.tools.embedded import free_port  # noqa: E402

from tests.e2e.chaos import Fleet, ProcessorOptions  # noqa: E402
from tests.e2e.chaos_feed import Feeder  # noqa: E402

MIB = 2**20
TOP_SITES = 15
TOP_TYPES = 12


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+)\s+kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else 0.0


def brk_heap_mib() -> float:
    """Resident part of the [heap] mapping: glibc's main arena, where every allocation too big
    for pymalloc (over 512 bytes) goes below the mmap threshold."""
    rss_kib = 0
    in_heap = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            in_heap = line.endswith("[heap]")
        elif in_heap and line.startswith("Rss:"):
            rss_kib += int(line.split()[1])
    return rss_kib / 1024


def trimmed_mib() -> float:
    """RSS given back by glibc's malloc_trim(0): freed memory the allocator kept resident."""
    before = rss_mib()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return round(before - rss_mib(), 1)


def feed(bootstrap: str, prefix: str, count: int, rate: float) -> None:
    """The feeder's process: publish `count` requests at `rate` per second, then return."""

    async def run() -> None:
        async with Feeder(bootstrap, prefix, count=count, rate_per_s=rate, id_prefix="h") as f:
            await f.wait(timeout_s=count / rate * 3 + 120)

    asyncio.run(run())


def heap_figures(trim: bool) -> dict[str, Any]:
    """This moment's memory, cheap enough to take while the processor runs: RSS, the [heap]
    mapping, traced bytes and live objects by type (the snapshot itself is dumped apart)."""
    gc.collect()
    traced, traced_peak = tracemalloc.get_traced_memory()
    types = Counter(type(o).__name__ for o in gc.get_objects())
    figures: dict[str, Any] = {
        "rss_mib": round(rss_mib(), 1),
        "brk_heap_mib": round(brk_heap_mib(), 1),
        "traced_mib": round(traced / MIB, 1),
        "traced_peak_mib": round(traced_peak / MIB, 1),
        "tracemalloc_overhead_mib": round(tracemalloc.get_tracemalloc_memory() / MIB, 1),
        "objects": dict(types.most_common(TOP_TYPES)),
    }
    if trim:
        figures["malloc_trim_gave_back_mib"] = trimmed_mib()
    return figures


def compare(paths: list[Path], frames: int) -> dict[str, Any]:
    """After the run (grouping a million traces in Python takes seconds the processor's
    heartbeats cannot wait): the sites that grew most from the first snapshot to the one that
    traced the most, and the largest sites in that one."""
    snapshots = [tracemalloc.Snapshot.load(str(p)) for p in paths]
    first = snapshots[0]
    fullest = max(snapshots, key=lambda s: sum(t.size for t in s.traces))
    grown = fullest.compare_to(first, "traceback")[:TOP_SITES]
    return {
        "fullest": paths[snapshots.index(fullest)].name,
        "grown": [
            {
                "kib": round(stat.size_diff / 1024, 1),
                "count": stat.count_diff,
                "at": [f"{f.filename}:{f.lineno}" for f in stat.traceback][:frames],
            }
            for stat in grown
        ],
        "largest": [
            {"kib": round(stat.size / 1024, 1), "count": stat.count, "at": str(stat.traceback[0])}
            for stat in fullest.statistics("lineno")[:TOP_SITES]
        ],
    }


async def soak_heap(args: argparse.Namespace, log_dir: Path) -> list[dict[str, Any]]:
    prefix = f"heap.{uuid.uuid4().hex[:8]}."
    print(f"[heap] prefix {prefix}, second member's log in {log_dir}", flush=True)
    await create_topics(args.bootstrap, load_topic_specs(prefix))
    port = free_port()
    simulator = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "embedstream.cli", "simulate", "--port", str(port),
        "--error-rate", str(args.error_rate), stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    options = ProcessorOptions(
        args.bootstrap, prefix, prefix + "group", base_url,
        max_buffered_bytes=64 * 2**20, max_event_bytes=2**20,  # the defaults: 5000 items
        max_batch_size=256, max_concurrency=4,
        session_timeout_ms=10_000, heartbeat_interval_ms=3000, commit_interval_ms=500,
    )  # fmt: skip
    # A snapshot stops the loop for seconds: a longer session than the harness's keeps this
    # member in the group through it (it changes nothing else of the run).
    settings = load_settings(
        env={},
        overrides={
            "bootstrap_servers": args.bootstrap, "topic_prefix": prefix,
            "group_id": options.group, "client_id": "heap-anchor", "base_url": base_url,
            "metrics_port": 0, "session_timeout_ms": 45_000,
            "heartbeat_interval_ms": options.heartbeat_interval_ms,
            "commit_interval_ms": options.commit_interval_ms, "fetch_max_wait_ms": 50,
            "max_wait_ms": 20, "max_buffered_bytes": options.max_buffered_bytes,
            "max_batch_size": options.max_batch_size,
            "max_concurrency": options.max_concurrency,
        },
    )  # fmt: skip
    tracemalloc.start(args.frames)
    backend = default_backend(settings)
    service = build_service(settings, backend)
    anchor = asyncio.create_task(service.run())
    events = int(args.minutes * 60 * args.rate)
    feeder = multiprocessing.get_context("spawn").Process(
        target=feed, args=(args.bootstrap, prefix, events, args.rate), daemon=True
    )
    samples: list[dict[str, Any]] = []
    dumps: list[Path] = []
    try:
        async with Fleet(options, log_dir) as fleet:
            second = fleet.add("second")
            await asyncio.wait_for(service.processor.assigned.wait(), 60)
            feeder.start()
            began = time.monotonic()
            next_change = began + args.rebalance_every_min * 60
            next_snapshot = began + args.warmup_min * 60
            while feeder.is_alive() and not anchor.done():
                now = time.monotonic()
                if now >= next_change:
                    if second.alive:
                        await second.sigterm(timeout_s=120)
                    else:
                        await second.start()
                        await second.wait_assigned(timeout_s=120)
                    next_change += args.rebalance_every_min * 60
                    print(f"[heap] second member {'joined' if second.alive else 'left'}")
                if now >= next_snapshot:
                    figures = heap_figures(args.trim_probe)
                    figures["at_s"] = round(now - began, 1)
                    path = log_dir / f"snapshot-{len(dumps):02d}.tracemalloc"
                    tracemalloc.take_snapshot().dump(str(path))
                    dumps.append(path)
                    samples.append(figures)
                    print("[heap] " + json.dumps(figures), flush=True)
                    next_snapshot += args.snapshot_every_min * 60
                await asyncio.sleep(1.0)
    finally:
        service.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(anchor, 120)
        await backend.close()
        feeder.terminate()
        simulator.terminate()
        await simulator.wait()
    tracemalloc.stop()
    if len(dumps) >= 2:
        sites = compare(dumps, args.frames)
        print("[heap] sites: " + json.dumps(sites, indent=1), flush=True)
        samples.append(sites)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to feed")
    parser.add_argument("--rate", type=float, default=500.0, help="requests per second")
    parser.add_argument("--error-rate", type=float, default=0.02, help="share of calls 500")
    parser.add_argument("--rebalance-every-min", type=float, default=2.0)
    parser.add_argument("--warmup-min", type=float, default=1.0, help="the first snapshot")
    parser.add_argument("--snapshot-every-min", type=float, default=2.0)
    parser.add_argument("--frames", type=int, default=10, help="frames kept per allocation")
    parser.add_argument(
        "--trim-probe", action="store_true", help="call malloc_trim(0) after each snapshot"
    )
    parser.add_argument("--out", default=None, help="write the snapshots' figures as JSON")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    log_dir = Path(tempfile.mkdtemp(prefix="embedstream-heap-"))
    samples = asyncio.run(soak_heap(args, log_dir))
    if args.out:
        Path(args.out).write_text(json.dumps(samples, indent=1))


if __name__ == "__main__":
    main()
