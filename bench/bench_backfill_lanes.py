"""The live lanes' tails during a migration's backfill (issue 31's benchmark): online callers
(HTTP, the processor's own `POST /v1/embeddings`) and high events (Kafka) at Poisson times,
with a backfill running in the processor's lowest lane and without one, arms interleaved
in one run on one broker and one provider.

    python bench/bench_backfill_lanes.py --bootstrap 127.0.0.1:39092 [--docs 3000]
    python bench/bench_backfill_lanes.py --via batch [--docs 1000]   # the backfill in batch jobs

A corpus goes to the documents topic and is embedded into PostgreSQL (pgserver) by a
processor (`embedstream run`, the online lane on) and a store writer (`embedstream sink`), as a
user runs them, against the simulator in this process (L(b) = 40 ms + 0.02 ms/token, 8 calls
at once: the bench's provider). That first fill is plain ingestion (the low lane) and gives
its documents per second. Then each round runs both arms: *with* starts a migration
(`migrate start`, a new model; each round other dimensions, so each backfill is a new
generation read from the corpus's start), waits for its first complete document, measures
for ``--seconds``, then cancels it and waits until the processor has let go of it; *without*
measures the same traffic alone. The cache is off: each backfill pays for what it embeds.

High latency: from an event's scheduled publication to its result read back from the results
topic by this process. Online latency: from a request's scheduled time to its answer. Prints
a table and one JSON object (the rows, the medians per arm, their ratios).

``--via batch``: each migration is started ``--via batch`` (its backfill in the simulator's
batch jobs, done in a second; jobs formed for 5 s, polled every second); after a cancel, the
next arm waits until the processor has no batch job left to write (their outcomes would
otherwise be written during it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import time
import uuid
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
import aiohttp
import orjson
from embedsim.config import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import configured_specs, create_topics
from embedstream.kafka.client.clients import (
    connection_for,
    make_reader,
    partitions_of,
    producer_for,
)
from embedstream.kafka.client.topics import configured_topics
from embedstream.settings import Settings, load_settings
from embedstream.tools.bench.documents_scenario import publish_records
from embedstream.tools.bench.remote_callers import OnlineCallers
from embedstream.tools.bench.workload import make_texts, poisson_arrivals
from embedstream.tools.embedded import free_port
from embedstream.tools.local_postgres import start_postgres

from bench.bench_backfill import statuses, until

ROOT = Path(__file__).parents[1]
OLD, NEW, OLD_DIMENSIONS = "text-embedding-3-small", "text-embedding-3-large", 32
LET_GO_S = 7.0  # a cancelled generation: the processors read the registry every 5 s
SETTLE_S = 5.0  # after a window, for the answers of what was sent in it
WORDS = ["river", "stone", "lantern", "orchard", "harbor", "meadow", "signal", "copper"]


def text_of(rng: random.Random, doc: str) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))) + "."
                 for _ in range(rng.randint(10, 60))]  # fmt: skip
    return f"{doc}. " + " ".join(sentences)


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


class Results:
    """Reads the results topic from its end: when each high event's result arrived."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self._reader = make_reader(connection_for(settings), fetch_max_wait_ms=10)
        self._topic = topic
        self.arrived: dict[str, float] = {}

    async def run(self, ready: asyncio.Event) -> None:
        await self._reader.start()
        try:
            partitions = await partitions_of(self._reader, self._topic)
            self._reader.assign(partitions)
            await self._reader.seek_to_end(*partitions)
            ready.set()
            loop = asyncio.get_running_loop()
            while True:
                batches = await self._reader.getmany(timeout_ms=50)
                now = loop.time()
                for records in batches.values():
                    for record in records:
                        key = (record.key or b"").decode()
                        if key.startswith("hb-"):
                            self.arrived.setdefault(key, now)
        finally:
            await self._reader.stop()


class CpuUse:
    """CPU over a window from /proc: the machine's busy share (of every core) and, per process,
    the cores it used on average (Linux only, as this bench is)."""

    TICK_S = 1 / os.sysconf("SC_CLK_TCK")

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = pids
        self._start = self._read()

    def _read(self) -> tuple[float, float, dict[str, float]]:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle, iowait
        used: dict[str, float] = {}
        for name, pid in self._pids.items():
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used[name] = (float(stat[11]) + float(stat[12])) * self.TICK_S  # utime, stime
        return sum(fields), idle, used

    def shares(self, seconds: float) -> dict[str, float]:
        total, idle, used = self._read()
        start_total, start_idle, start_used = self._start
        busy = 1 - (idle - start_idle) / max(1.0, total - start_total)
        out = {"machine_busy": round(busy, 2)}
        out |= {f"{k}_cores": round((used[k] - start_used[k]) / seconds, 2) for k in used}
        return out


async def high_traffic(
    settings: Settings, topic: str, rate: float, seconds: float, tag: str
) -> dict[str, float]:
    """High events at Poisson times; each id's scheduled time."""
    producer = producer_for(connection_for(settings), linger_ms=0)
    await producer.start()
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    scheduled: dict[str, float] = {}
    seed = zlib.crc32(tag.encode())
    arrivals = poisson_arrivals(rate, seconds, seed=seed)
    texts = make_texts(len(arrivals), seed=seed)
    try:
        for i, offset in enumerate(arrivals):
            due = start + offset
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            rid = f"hb-{tag}-{i}"
            scheduled[rid] = due
            value = orjson.dumps({"id": rid, "text": f"{tag} {texts[i]}"})
            await producer.send(topic, value, key=rid.encode())
        await producer.flush()
    finally:
        await producer.stop()
    return scheduled


async def cli(env: dict[str, str], *args: str) -> str:
    done = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "embedstream.cli", *args, env=env, stdout=asyncio.subprocess.PIPE
    )
    said, _ = await done.communicate()
    if done.returncode != 0:
        raise RuntimeError(f"embedstream {' '.join(args[:2])} failed ({done.returncode})")
    return said.decode()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--high-rate", type=float, default=20.0)
    parser.add_argument("--online-rate", type=float, default=10.0)
    parser.add_argument(
        "--via",
        choices=["sync", "batch"],
        default="sync",
        help="how each migration's backfill embeds (migrate start --via)",
    )
    parser.add_argument("--processor-arg", action="append", default=[], metavar="ARG",
                        help="one more argument of `embedstream run`, after an equals sign "
                        "(--processor-arg=--online-target-ms=60)")  # fmt: skip
    args = parser.parse_args()
    simulator = SimulatorConfig(base_ms=40.0, per_token_ms=0.02, capacity=8)
    with start_postgres() as postgres:
        async with SimulatorServer(simulator) as sim:
            report = await measure(args, postgres.dsn, sim.url)
    print(json.dumps(report, indent=2))


async def measure(args: argparse.Namespace, dsn: str, provider_url: str) -> dict[str, object]:
    prefix = f"bl{uuid.uuid4().hex[:8]}."
    table = f"bl_{uuid.uuid4().hex[:8]}"
    documents = prefix + "documents"
    settings = load_settings(env={}, overrides={
        "bootstrap_servers": args.bootstrap, "topic_prefix": prefix, "store_dsn": dsn,
        "store_table": table, "topic_documents": documents,
    })  # fmt: skip
    await create_topics(connection_for(settings), configured_specs(settings))
    http_port = free_port()
    args.metrics_port = free_port()
    if args.via == "batch":  # the bench's jobs: formed for 5 s, polled every second
        args.processor_arg = ["--batch-form-s=5", "--batch-poll-s=1", *args.processor_arg]
    common = [
        "--bootstrap-servers",
        args.bootstrap,
        "--topic-prefix",
        prefix,
        "--store-dsn",
        dsn,
        "--store-table",
        table,
        "--topic-documents",
        documents,
    ]
    run = [
        "run",
        *common,
        "--base-url",
        provider_url,
        "--dimensions",
        str(OLD_DIMENSIONS),
        "--cache",
        "off",
        "--max-concurrency",
        "8",
        "--http-port",
        str(http_port),
        "--group-id",
        prefix + "group",
        "--metrics-port",
        str(args.metrics_port),
        *args.processor_arg,
    ]
    sink = ["sink", *common, "--store-model", OLD, "--store-group-id", prefix + "sink",
            "--metrics-port", str(free_port())]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'stream'}:{ROOT}"}
    rng = random.Random(31)
    corpus = {f"doc-{d:05}": text_of(rng, f"doc {d}") for d in range(args.docs)}
    records = [(d.encode(), orjson.dumps({"doc_id": d, "text": t})) for d, t in corpus.items()]
    cli_argv = [sys.executable, "-m", "embedstream.cli"]
    processes = [await asyncio.create_subprocess_exec(*cli_argv, *a, env=env) for a in (run, sink)]
    results = Results(settings, configured_topics(settings).results)
    ready = asyncio.Event()
    reading = asyncio.create_task(results.run(ready))
    try:
        await ready.wait()
        began = time.monotonic()
        await publish_records(settings, documents, records)

        async def first_done() -> bool:
            with contextlib.suppress(Exception):
                found = await statuses(settings)
                return len(found) == 1 and found[0].complete == args.docs
            return False

        await until(first_done, 1800, "the first generation")
        ingest_docs_per_s = args.docs / (time.monotonic() - began)
        print(f"plain ingestion: {ingest_docs_per_s:.1f} documents/s", file=sys.stderr)
        migrate = ["migrate", "--store-dsn", dsn, "--store-table", table]
        rows: list[dict[str, object]] = []
        for round_ in range(args.rounds):
            arms = ("without", "with") if round_ % 2 == 0 else ("with", "without")
            for arm in arms:
                dimensions = 48 + 8 * round_
                pids = {"processor": processes[0].pid, "writer": processes[1].pid}
                row = await one_arm(args, settings, env, migrate, results, arm, round_,
                                    dimensions, http_port, pids)  # fmt: skip
                rows.append(row)
                print(row_line(row), file=sys.stderr)
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        for process in processes:
            process.terminate()
            await process.wait()
    return summary(args, ingest_docs_per_s, rows)


async def one_arm(
    args: argparse.Namespace, settings: Settings, env: dict[str, str], migrate: list[str],
    results: Results, arm: str, round_: int, dimensions: int, http_port: int,
    pids: dict[str, int],
) -> dict[str, object]:  # fmt: skip
    done_before = 0
    if arm == "with":
        await cli(env, *migrate, "start", "--model", NEW, "--dimensions", str(dimensions),
                  "--via", args.via)  # fmt: skip

        async def backfilling() -> bool:
            found = await statuses(settings)
            return len(found) == 2 and found[1].complete > 0

        await until(backfilling, 120, "the backfill's first document")
        done_before = (await statuses(settings))[1].complete
    tag = f"r{round_}{arm}"
    url = f"http://127.0.0.1:{http_port}/v1/embeddings"
    callers = OnlineCallers(url, settings.model, args.online_rate, args.seconds)
    loop = asyncio.get_running_loop()
    started = loop.time()
    cpu = CpuUse(pids)
    async with aiohttp.ClientSession() as session:
        calling = asyncio.create_task(callers.run(session, started + 0.05))
        high_topic = configured_topics(settings).requests_high
        scheduled = await high_traffic(settings, high_topic, args.high_rate, args.seconds, tag)
        await calling
        window = loop.time() - started
        cpu_use = cpu.shares(window)
        done_after = (await statuses(settings))[1].complete if arm == "with" else 0
        await callers.settle(SETTLE_S)
    deadline = loop.time() + SETTLE_S
    while loop.time() < deadline and not set(scheduled) <= set(results.arrived):  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    high = [results.arrived[r] - t for r, t in scheduled.items() if r in results.arrived]
    backfilled = done_after - done_before
    finished = False
    if arm == "with":
        finished = (await statuses(settings))[1].complete >= args.docs
        await cli(env, *migrate, "cancel")
        await asyncio.sleep(LET_GO_S)
        if args.via == "batch":
            await until(lambda: no_jobs_left(args.metrics_port), 600, "the batch jobs' end")
    return {
        "round": round_, "arm": arm,
        "high_sent": len(scheduled), "high_answered": len(high),
        "high_p50_s": quantile(high, 0.5), "high_p99_s": quantile(high, 0.99),
        "online_sent": callers.sent, "online_failed": callers.failed,
        "online_p50_s": quantile(callers.latencies_s, 0.5),
        "online_p99_s": quantile(callers.latencies_s, 0.99),
        "backfill_docs_per_s": round(backfilled / window, 1) if arm == "with" else None,
        "backfill_finished_early": finished, **cpu_use,
    }  # fmt: skip


async def no_jobs_left(metrics_port: int) -> bool:
    """The processor follows no batch job that has outcomes still to write."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    open_states = ('state="forming"', 'state="closed"', 'state="submitted"', 'state="ended"')
    return not any(
        line.startswith("embedstream_batch_jobs{")
        and any(s in line for s in open_states)
        and float(line.rsplit(" ", 1)[1]) > 0
        for line in text.splitlines()
    )


def row_line(row: dict[str, object]) -> str:
    def sec(key: str) -> str:
        value = row[key]
        return ms(value if isinstance(value, float) else None)

    return (
        f"round {row['round']} {row['arm']:>7}: high P50/P99 {sec('high_p50_s')}/"
        f"{sec('high_p99_s')} ms ({row['high_answered']}/{row['high_sent']}), online "
        f"P50/P99 {sec('online_p50_s')}/{sec('online_p99_s')} ms ({row['online_sent']} sent, "
        f"{row['online_failed']} failed), backfill {row['backfill_docs_per_s']} docs/s; "
        f"machine {row['machine_busy']} busy, cores: processor {row['processor_cores']}, "
        f"store writer {row['writer_cores']}"
    )


def summary(
    args: argparse.Namespace, ingest_docs_per_s: float, rows: list[dict[str, object]]
) -> dict[str, object]:
    medians: dict[str, dict[str, float]] = {}
    for arm in ("without", "with"):
        mine = [r for r in rows if r["arm"] == arm]
        figures: dict[str, float] = {}
        for key in ("high_p50_s", "high_p99_s", "online_p50_s", "online_p99_s"):
            values = [v for r in mine if isinstance(v := r[key], float)]
            if values:
                figures[key] = statistics.median(values)
        for key in ("machine_busy", "processor_cores", "writer_cores"):
            figures[key] = statistics.median(float(r[key]) for r in mine)  # type: ignore[arg-type]
        if arm == "with":
            rates = [v for r in mine if isinstance(v := r["backfill_docs_per_s"], float)]
            figures["backfill_docs_per_s"] = statistics.median(rates) if rates else 0.0
        medians[arm] = figures
    ratios = {
        key: round(medians["with"][key] / medians["without"][key], 2)
        for key in ("high_p99_s", "online_p99_s")
        if medians["without"].get(key) and key in medians["with"]
    }
    backfill = medians["with"].get("backfill_docs_per_s", 0.0)
    return {
        "docs": args.docs, "via": args.via, "seconds": args.seconds, "high_rate": args.high_rate,
        "online_rate": args.online_rate, "plain_ingestion_docs_per_s": round(ingest_docs_per_s, 1),
        "backfill_over_ingestion": round(backfill / ingest_docs_per_s, 2),
        "rows": rows, "medians": medians, "with_over_without": ratios,
    }  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
