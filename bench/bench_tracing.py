"""What tracing costs the processor: CPU per item with tracing off, on at ratio 1.0 and 0.01.

    python bench/bench_tracing.py                  # 20,000 items x 3 rounds of each variant
    python bench/bench_tracing.py --items 50000 --rounds 5
    python bench/bench_tracing.py --baseline ../main   # also off vs a checkout without tracing

The whole Kafka shell (admission, batcher, batch-call path, sink, commits) runs on the
in-memory cluster of `embedstream.testing.kafka` against a provider that answers at once, so
the process's CPU time is embedstream's own. Tracing on exports through the SDK's batch
processor to an exporter that encodes each batch as the OTLP protobuf an HTTP export would
send, then drops it (the HTTP send itself is the collector's network, not ours). Variants are
interleaved round by round, each in a fresh process, and the median and the least CPU per
item (the least is the steadier on a shared machine: contention only adds) are reported side
by side, with their ratios to off. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))
import orjson
from embedstream.app.processor import build_service
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.kafka.client.admin import topic_names
from embedstream.settings import load_settings
from embedstream.testing.kafka import FakeCluster, FakeConsumer, FakeProducer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

NAMES = topic_names("bench.")
VECTOR: list[float] = [0.1] * 8


class EncodingExporter(SpanExporter):
    """Encodes every batch as OTLP protobuf (what the HTTP exporter sends), then drops it."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> Any:
        self.bytes += len(encode_spans(spans).SerializeToString())
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class InstantBackend:
    async def embed(self, call: BatchCall) -> BatchOutcome:
        return BatchOutcome([VECTOR] * len(call.texts), 8, 4 * len(call.texts), 0.0)

    async def close(self) -> None:
        return None


async def drain(items: int, tracer: Any) -> float:
    """CPU seconds per item for one processor to turn `items` requests into results."""
    cluster = FakeCluster({NAMES.requests_high: 1, NAMES.requests_low: 4, NAMES.retry: 1,
                           NAMES.results: 4, NAMES.dead_letters: 1})  # fmt: skip
    for i in range(items):
        value = orjson.dumps({"id": f"r{i}", "text": f"request number {i} of the bench"})
        # No traceparent: new traces, so tracing_sample_ratio decides (a sampled incoming
        # one would be followed whatever the ratio).
        cluster.produce(NAMES.requests_low, value, f"r{i}".encode())
    settings = load_settings(env={}, overrides={
        "topic_prefix": "bench.", "metrics_port": 0, "max_batch_size": 256, "max_wait_ms": 5,
        "commit_interval_ms": 50,
    })  # fmt: skip
    traced: dict[str, Any] = {} if tracer is None else {"tracer": tracer}  # main has none
    service = build_service(
        settings, InstantBackend(), consumer=FakeConsumer(cluster),
        producer=FakeProducer(cluster), **traced,
    )  # fmt: skip
    started = time.process_time()
    task = asyncio.create_task(service.run())
    while len(cluster.records(NAMES.results)) < items:  # noqa: ASYNC110  # the fake has no event
        await asyncio.sleep(0.01)
    service.stop()
    await task  # the tracer is closed: every span encoded
    return (time.process_time() - started) / items


def tracer(ratio: float, exporter: EncodingExporter) -> Any:
    from embedstream.ops.tracing import OtelTracer  # not in a baseline checkout

    return OtelTracer(exporter, service_name="bench", sample_ratio=ratio, group_id="bench",
                      provider_name="openai", max_links=256)  # fmt: skip


VARIANTS: dict[str, float | None] = {"off": None, "on, ratio 1.0": 1.0, "on, ratio 0.01": 0.01}


def child(variant: str, items: int) -> None:
    """One measurement in this fresh process: CPU per item, and spans per item."""
    asyncio.run(drain(2_000, None))  # warm-up: imports, first allocations
    ratio = VARIANTS.get(variant)
    exporter = EncodingExporter()
    chosen = None if ratio is None else tracer(ratio, exporter)
    print(orjson.dumps([asyncio.run(drain(items, chosen)), exporter.spans / items]).decode())


def measure(variant: str, items: int, source: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": f"{source / 'stream'}:{source}"}
    command = [sys.executable, __file__, "--child", variant, "--items", str(items)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    cpu, spans = orjson.loads(done.stdout.splitlines()[-1])
    return float(cpu), float(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout without tracing: off A/B")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.items)
        return
    here = Path(__file__).resolve().parent.parent
    runs = [(name, name, here) for name in VARIANTS]
    runs.insert(1, ("off (again: the noise)", "off", here))
    if args.baseline is not None:
        runs.insert(0, (f"baseline ({args.baseline.name})", "off", args.baseline.resolve()))
    cpu: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    spans: dict[str, float] = {}
    for _ in range(args.rounds):  # interleaved: the machine's load falls on every variant
        for label, variant, source in runs:
            measured, spans[label] = measure(variant, args.items, source)
            cpu[label].append(measured)
    off = statistics.median(cpu["off"])
    best_off = min(cpu["off"])
    print(f"{args.items:,} items x {args.rounds} rounds, each in a fresh process: CPU per item")
    print(f"{'variant':<24} {'median µs':>9} {'vs off':>7} {'min µs':>7} {'vs off':>7} "
          f"{'spans/item':>10}")  # fmt: skip
    for label, _, _ in runs:
        median, best = statistics.median(cpu[label]), min(cpu[label])
        print(f"{label:<24} {median * 1e6:9.1f} {median / off:6.2f}x {best * 1e6:7.1f} "
              f"{best / best_off:6.2f}x {spans[label]:10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
