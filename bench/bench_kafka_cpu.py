"""The processor's CPU per item through Kafka, and where it goes by function group (issue 20).

    python bench/bench_kafka_cpu.py --bootstrap 127.0.0.1:39092          # Apache Kafka
    python bench/bench_kafka_cpu.py                                     # the in-memory cluster
    python bench/bench_kafka_cpu.py --bootstrap ... --baseline ../main --rounds 3
    python bench/bench_kafka_cpu.py --bootstrap ... --profile-only --top 25
    python bench/bench_kafka_cpu.py --bootstrap ... --cache off --results base64   # as kafka-floor

One processor (`embedstream bench`'s settings: batches up to 2048, 8 call slots) drains
``--items`` requests of 30-token texts from its low topic, on Apache Kafka through aiokafka or
on `embedstream.testing.kafka`'s in-memory cluster, against a provider that answers at once
with the body a provider sends (base64 float32 vectors of 256 dimensions, built once per call
size) parsed by the embedder's own rules. So the CPU is embedstream's own (and aiokafka's),
from the assignment to the last result counted, as `kafka-floor` counts it, without the
provider's and without HTTP (about 1 µs per item at these call sizes).

Each measurement runs in a fresh process; the variants (this checkout and, with
``--baseline``, another) are interleaved round by round. Then one more run of this checkout
is sampled by py-spy (the `bench` extra; a process of its own, so the drain runs at full
speed: cProfile tripled the CPU per item and charged whole collector pauses to `round()`),
which gives µs per item by function group. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))
import orjson
from embedstream.app.processor import build_service
from embedstream.engine.answers import parse_body
from embedstream.engine.backend import BatchCall, BatchOutcome, EmbeddingBackend
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.kafka.client.admin import topic_names
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, load_settings
from embedstream.testing.kafka import FakeCluster, FakeConsumer, FakeProducer
from embedstream.tools.bench.figures import PROVIDER_MAX_INPUTS, PROVIDER_MAX_TOKENS, LatencyModel
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    running_processor,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.processes import SimulatorProcess
from embedstream.tools.bench.recorder import TimedBackend
from embedstream.tools.bench.workload import make_texts

DIMENSIONS = 256
POLL_S = 0.005


class ParsedInstantBackend:
    """Answers at once: a provider's body for the call's size (built once per size, as the
    provider's work), parsed by `engine.answers.parse_body` as the lean embedder does."""

    def __init__(self, dimensions: int) -> None:
        self._vector = base64.b64encode(bytes(range(4)) * dimensions).decode()
        self._bodies: dict[int, bytes] = {}

    def _body(self, size: int) -> bytes:
        body = self._bodies.get(size)
        if body is None:
            data = [{"object": "embedding", "index": i, "embedding": self._vector}
                    for i in range(size)]  # fmt: skip
            body = self._bodies[size] = orjson.dumps(
                {"object": "list", "data": data, "model": "m",
                 "usage": {"prompt_tokens": 30 * size, "total_tokens": 30 * size}}
            )  # fmt: skip
        return body

    async def embed(self, call: BatchCall) -> BatchOutcome:
        return parse_body(call, self._body(len(call.texts)), 0.001, {})

    async def close(self) -> None:
        return None


def bench_settings(**overrides: Any) -> Settings:
    """`embedstream bench`'s engine settings against a provider of 8 slots."""
    return load_settings(env={}, overrides={
        "max_batch_size": PROVIDER_MAX_INPUTS, "max_batch_tokens": PROVIDER_MAX_TOKENS,
        "max_concurrency": 8,
        "log_level": "WARNING", "metrics_port": 0, **overrides,
    })  # fmt: skip


def results(metrics: Metrics) -> float:
    return metrics.results_counted("high", "low")


class Sampler:
    """py-spy sampling this process (``path`` None: nothing) from :meth:`start` to
    :meth:`stop`; raw stacks, idle moments left out, so samples follow CPU time."""

    RATE_PER_S = 250

    def __init__(self, path: Path | None, rate_per_s: int = RATE_PER_S) -> None:
        self._path = path
        self._rate_per_s = rate_per_s
        self._spy: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self._path is None:
            return
        command = ["py-spy", "record", "--pid", str(os.getpid()), "--format", "raw", "--rate",
                   str(self._rate_per_s), "--nonblocking", "-o", str(self._path)]  # fmt: skip
        self._spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached before the drain starts (nothing runs meanwhile)

    def stop(self) -> None:
        if self._spy is not None:
            self._spy.send_signal(signal.SIGINT)  # py-spy writes its file on an interrupt
            self._spy.wait(timeout=60)


async def _until_done(metrics: Metrics, items: int) -> float:
    """CPU seconds from now until ``items`` results are counted."""
    started = time.process_time()
    while results(metrics) < items:  # noqa: ASYNC110  # the metrics have no event
        await asyncio.sleep(POLL_S)
    return time.process_time() - started


def _collector() -> contextlib.AbstractContextManager[None]:
    """The collector as `embedstream run` sets it; as CPython has it in a checkout from before
    `ops/collector.py` (a --baseline)."""
    try:
        from embedstream.ops.collector import collector_for_throughput
    except ImportError:
        return contextlib.nullcontext()
    return collector_for_throughput()


async def drain_in_memory(
    items: int, sampler: Sampler, encoding: str = "float", cache: str = "memory"
) -> float:
    names = topic_names("bench.")
    cluster = FakeCluster({names.requests_high: 1, names.requests_low: 4, names.retry: 1,
                           names.results: 4, names.dead_letters: 1})  # fmt: skip
    for i, text in enumerate(make_texts(items)):
        cluster.produce(names.requests_low, orjson.dumps({"id": f"r{i}", "text": text}),
                        f"r{i}".encode())  # fmt: skip
    metrics = Metrics()
    settings = bench_settings(topic_prefix="bench.", encoding_format=encoding, cache=cache)
    backend = ParsedInstantBackend(DIMENSIONS)
    consumer, producer = FakeConsumer(cluster), FakeProducer(cluster)
    service = build_service(
        settings, backend, metrics=metrics, consumer=consumer, producer=producer
    )
    with _collector():  # as `embedstream run` has it (app.run_service)
        sampler.start()
        task = asyncio.create_task(service.run())
        cpu = await _until_done(metrics, items)
        sampler.stop()
        service.stop()
        await task
    return cpu


async def drain_on_kafka(
    bootstrap: str,
    items: int,
    sampler: Sampler,
    encoding: str = "float",
    cache: str = "memory",
    simulator: bool = False,
) -> float:
    """``simulator``: the provider is `embedstream simulate` at the bench's reference model in
    a process of its own, called through the embedder (kafka-floor's arm, HTTP included)."""
    settings = KafkaBroker(bootstrap, embedded=False).settings(
        bench_settings(encoding_format=encoding, cache=cache), unique_prefix("cpu")
    )
    async with contextlib.AsyncExitStack() as stack:
        if simulator:
            provider = await stack.enter_async_context(_simulator())
            settings = dataclasses.replace(settings, base_url=provider.base_url, api_key=None)
        names = await stack.enter_async_context(scenario_topics(settings))
        await publish(settings, names.requests_low, make_texts(items), "cpu-")
        metrics = Metrics()
        provider_backend: EmbeddingBackend = (
            OpenAIEmbedder.from_settings(settings) if simulator
            else ParsedInstantBackend(DIMENSIONS)
        )  # fmt: skip
        async with running_processor(settings, TimedBackend(provider_backend), metrics):
            sampler.start()  # from the assignment on, as the CPU is counted (and kafka-floor's)
            cpu = await _until_done(metrics, items)
            sampler.stop()
            return cpu


@contextlib.asynccontextmanager
async def _simulator() -> AsyncIterator[SimulatorProcess]:
    with tempfile.TemporaryDirectory() as log_dir:
        process = SimulatorProcess(
            LatencyModel(), dimensions=DIMENSIONS, burst_s=1.0, log_dir=Path(log_dir)
        )
        await process.start()
        try:
            yield process
        finally:
            process.stop()


def child(args: argparse.Namespace) -> None:
    """One measurement in this fresh process: CPU per item (and a profile if asked)."""
    asyncio.run(drain_in_memory(2_000, Sampler(None)))  # warm-up: imports, first allocations
    sampler = Sampler(args.profile, args.rate)
    if args.bootstrap:
        cpu = asyncio.run(
            drain_on_kafka(
                args.bootstrap, args.items, sampler, args.encoding, args.cache, args.simulator
            )
        )
    else:
        cpu = asyncio.run(drain_in_memory(args.items, sampler, args.encoding, args.cache))
    print(orjson.dumps(cpu / args.items).decode())


def measure(
    args: argparse.Namespace, source: Path, encoding: str, profile: Path | None = None
) -> float:
    env = {**os.environ, "PYTHONPATH": f"{source / 'stream'}:{source}"}
    command = [sys.executable, __file__, "--child", "--items", str(args.items)]
    command += ["--encoding", encoding, "--cache", args.cache, "--rate", str(args.rate)]
    command += ["--bootstrap", args.bootstrap] if args.bootstrap else []
    command += ["--simulator"] if args.simulator else []
    command += ["--profile", str(profile)] if profile else []
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"a measurement failed:\n{done.stderr[-3000:]}")
    return float(orjson.loads(done.stdout.splitlines()[-1]))


# --------------------------------------------------------------------------- the profile

# (group, fragments): the first group with a fragment in a function's file wins; a fragment
# "file:name" takes only the function of that name in that file.
# fmt: off
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("outcomes, result encode",
     ("wire/events.py:encode", "wire/formats/results", "wire/result_records",
      "kafka/outputs/outcomes")),
    ("intake, validation (request decode, admission, tokens)",
     ("kafka/consumption/admission", "kafka/consumption/attribution",
      "kafka/consumption/records_to_work", "core/intake", "wire/requests", "core/tokens",
      "wire/events", "wire/formats", "core/limits", "kafka/consumption/early_retries",
      "core/flow")),
    ("batcher (buckets, policy, shares, governor, cost model)",
     ("engine/batcher", "core/policy", "core/lanes", "core/shares", "core/governor",
      "core/costmodel", "core/concurrency", "core/scheduler", "core/highguard", "core/dedup")),
    ("batch-call path (calls, jobs, callers)",
     ("engine/calls", "engine/jobs", "engine/client", "engine/cache", "core/cachekeys")),
    ("vector decode (answer parse)", ("engine/answers", "wire/vectors")),
    ("the bench's instant provider (not embedstream)", ("bench_kafka_cpu",)),
    ("writes, offsets, commits (the results writer, partitions)",
     ("kafka/outputs/result_writer", "kafka/outputs/partitions", "core/offsets",
      "kafka/consumption/commits", "kafka/outputs/work", "kafka/consumption/handoff",
      "kafka/client/partitioning")),
    ("fetching, processor loop",
     ("kafka/consumption/fetcher", "kafka/consumption/processor_loop", "kafka/client/reader")),
    ("metrics, tracing, logs", ("ops/", "prometheus_client", "core/tracing", "core/observer")),
    ("aiokafka (and its protocol, compression)", ("aiokafka", "kafka/protocol")),
    ("HTTP client (aiohttp, the openai SDK, httpx)",
     ("aiohttp", "yarl", "multidict", "engine/lean_http", "engine/embedder", "openai/", "httpx",
      "httpcore", "anyio", "h11", "pydantic")),
    ("load generator and bench (in process)", ("tools/bench/", "bench_tails")),
    ("in-memory cluster (the fake Kafka)", ("embedstream/testing",)),
    ("asyncio, event loop", ("asyncio", "selectors", "uvloop")),
)
# fmt: on
OTHER = "other (stdlib, embedstream rest)"


def group_of(filename: str, function: str) -> str:
    path = filename.replace("\\", "/")
    for group, fragments in GROUPS:
        for fragment in fragments:
            where, _, name = fragment.partition(":")
            if where in path and (not name or function.split(".")[-1] == name):
                return group
    return OTHER


_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.*):(?P<line>\d+)\)$")


def _frame(text: str) -> tuple[str, str]:
    """(function, file) of one frame of py-spy's raw output."""
    found = _FRAME.match(text.strip())
    return (found["name"], found["file"]) if found else (text.strip(), "")


def profile_table(path: Path, items: int, cpu_per_item: float, top: int) -> str:
    """µs per item by function group: each sample goes to its innermost frame's group (C
    functions have no frame: their time is their Python caller's), scaled to the profiled
    run's own CPU per item. Samples in the event loop's selector are left out: py-spy takes
    a thread waiting in epoll_wait for a running one often enough to skew every share (behind
    the simulator's 40 ms calls: 2.6 µs an item there, where process_time around each
    select() counted 0.8 µs)."""
    by_group: dict[str, int] = {}
    own: dict[tuple[str, str], int] = {}
    inclusive: dict[tuple[str, str], int] = {}
    total = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";")]
        leaf = frames[-1]
        if leaf[0].endswith("Selector.select") and leaf[1].endswith("selectors.py"):
            continue  # waiting for the loop's next event (see above)
        group = group_of(leaf[1], leaf[0])
        by_group[group] = by_group.get(group, 0) + count
        own[leaf] = own.get(leaf, 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
        total += count
    if total == 0:
        return "no samples (could py-spy attach? it needs ptrace rights)"
    us = cpu_per_item * 1e6
    lines = [f"py-spy: {total:,} samples of the drain, {us:.1f} µs of CPU per item in that run",
             "", "| function group | µs/item | share |", "|---|---:|---:|"]  # fmt: skip
    for group, samples in sorted(by_group.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {group} | {us * samples / total:.1f} | {samples / total:.0%} |")
    lines += ["", f"top {top} functions by own samples (C calls inside count as theirs):", "",
              "| function | own µs/item | with callees µs/item |", "|---|---:|---:|"]  # fmt: skip
    for (name, filename), samples in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        where = "/".join(Path(filename).parts[-2:])
        with_callees = inclusive[(name, filename)]
        lines.append(f"| `{where} {name}` | {us * samples / total:.1f} "
                     f"| {us * with_callees / total:.1f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", help="Apache Kafka (default: the in-memory cluster)")
    parser.add_argument("--baseline", type=Path, help="a checkout to measure beside this one")
    parser.add_argument("--profile-only", action="store_true", help="no plain rounds")
    parser.add_argument("--top", type=int, default=20, help="functions listed in the profile")
    parser.add_argument("--base64-arm", action="store_true",
                        help="also this checkout, requests asking base64 (no decode)")  # fmt: skip
    parser.add_argument("--results", choices=("float", "base64"), default="float",
                        help="the requests' encoding_format (kafka-floor's: base64, the "
                        "provider's vectors written as they come)")  # fmt: skip
    parser.add_argument("--simulator", action="store_true",
                        help="with --bootstrap: the provider is `embedstream simulate` at "
                        "the bench's reference model, called over HTTP "
                        "(kafka-floor's arm)")  # fmt: skip
    parser.add_argument("--rate", type=int, default=Sampler.RATE_PER_S,
                        help="py-spy's samples a second in the profile")  # fmt: skip
    parser.add_argument("--encoding", default="float", help=argparse.SUPPRESS)
    parser.add_argument("--cache", choices=("memory", "off"), default="memory",
                        help="the embedding cache (default: the library's, memory)")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    here = Path(__file__).resolve().parent.parent
    variants = [("this checkout", here, args.results)]
    if args.baseline is not None:
        baseline = args.baseline.resolve()
        variants.insert(0, (f"baseline ({args.baseline.name})", baseline, args.results))
    if args.base64_arm:
        variants.append(("this checkout, results in base64", here, "base64"))
    if args.simulator and not args.bootstrap:
        parser.error("--simulator needs --bootstrap (the in-memory cluster's provider is instant)")
    where = f"Apache Kafka at {args.bootstrap}" if args.bootstrap else "the in-memory cluster"
    if args.simulator:
        where += ", the simulator over HTTP"
    print(f"{args.items:,} requests through one processor on {where} ({args.results} results, "
          f"cache {args.cache}); load average {os.getloadavg()[0]:.1f} at the start")  # fmt: skip
    if not args.profile_only:
        cpu: dict[str, list[float]] = {label: [] for label, _, _ in variants}
        for _ in range(args.rounds):  # interleaved: the machine's load falls on every variant
            for label, source, encoding in variants:
                cpu[label].append(measure(args, source, encoding))
        first = cpu[variants[0][0]]
        print("\n| variant | median µs/item | least µs/item | rounds (µs/item) "
              "| vs first: median, least |")  # fmt: skip
        print("|---|---:|---:|---|---:|")
        for label, _, _ in variants:
            runs = cpu[label]
            print(f"| {label} | {statistics.median(runs) * 1e6:.1f} | {min(runs) * 1e6:.1f} "
                  f"| {', '.join(f'{r * 1e6:.0f}' for r in runs)} "
                  f"| {statistics.median(runs) / statistics.median(first):.2f}x, "
                  f"{min(runs) / min(first):.2f}x |")  # fmt: skip
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"kafka_cpu_{os.getpid()}.txt"
    cpu_per_item = measure(args, here, args.results, profile)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end; profile in {profile}\n")
    print(profile_table(profile, args.items, cpu_per_item, args.top))


if __name__ == "__main__":
    main()
