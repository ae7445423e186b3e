"""The edit benchmark of documents: what an edit costs, and documents' throughput beside plain
requests, measured in one run on Apache Kafka.

    python bench/bench_documents.py --bootstrap 127.0.0.1:39092 [--docs 1000] [--paragraphs 20]

One processor (cache=memory, so it must live across the passes) and the simulator in this
process. Pass 1 publishes `docs` documents of `paragraphs` paragraphs (about one chunk each at
the default chunking rules); pass 2 publishes the same set again with one paragraph edited in
`edited` of them (a new version each: the chunker's cuts are local, so only the chunks around
the edit are new texts; the rest hit the cache); pass 3 publishes plain requests with the same
number of distinct paragraph-sized texts, for items/s beside chunks/s. Tokens are the
simulator's own count of what it was sent.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
from embedsim import SimulatorConfig, SimulatorServer
from embedstream.app import build_service, default_backend
from embedstream.kafka.admin import (
    TopicNames,
    create_topics,
    delete_topics,
    list_topics,
    load_topic_specs,
    topic_names,
)
from embedstream.kafka.clients import connection_for, producer_for
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, load_settings

from bench.cache_scenario import WORDS


def paragraph(rng: random.Random, words: int) -> str:
    sentences = []
    for _ in range(words // 12):
        sentence = " ".join(rng.choice(WORDS) for _ in range(12))
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(sentences)


def make_documents(
    docs: int, paragraphs: int, edited_share: float, seed: int
) -> tuple[list[str], list[str]]:
    """The first pass's texts and the second's: one paragraph edited in `edited_share`."""
    rng = random.Random(seed)
    first = [
        "\n\n".join(f"doc {d} part {p}. " + paragraph(rng, 160) for p in range(paragraphs))
        for d in range(docs)
    ]
    second = list(first)
    for d in rng.sample(range(docs), round(docs * edited_share)):
        parts = first[d].split("\n\n")
        p = rng.randrange(len(parts))
        words = parts[p].split(" ")
        words[len(words) // 2] = "EDITED"  # one word in the middle of one paragraph
        parts[p] = " ".join(words)
        second[d] = "\n\n".join(parts)
    return first, second


async def publish(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = producer_for(bootstrap, linger_ms=20, max_batch_size=1_048_576)
    await producer.start()
    try:
        for start in range(0, len(records), 2000):
            sends = [await producer.send(topic, v, key=k) for k, v in records[start : start + 2000]]
            await asyncio.gather(*sends)
    finally:
        await producer.stop()


@dataclass(frozen=True)
class PassRow:
    name: str
    records: int
    chunks: int  # what the provider was asked to embed, before the cache: chunks or requests
    inputs: int  # texts the provider was sent
    tokens: int  # tokens the provider counted
    seconds: float

    @property
    def per_s(self) -> float:
        return self.chunks / self.seconds


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.registry.get_sample_value(name, labels or {}) or 0.0


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--paragraphs", type=int, default=20)
    parser.add_argument("--edited", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=7)
    ns = parser.parse_args(argv)
    first, second = make_documents(ns.docs, ns.paragraphs, ns.edited, ns.seed)
    prefix = f"bench.docs.{uuid.uuid4().hex[:8]}."
    names = topic_names(prefix)
    async with SimulatorServer(SimulatorConfig(base_ms=5, capacity=8)) as simulator:
        settings = load_settings(
            env={},
            overrides={
                "bootstrap_servers": ns.bootstrap, "topic_prefix": prefix,
                "group_id": prefix + "group", "base_url": simulator.url, "metrics_port": 0,
                "encoding_format": "base64", "max_concurrency": 8, "log_level": "WARNING",
                "cache": "memory", "cache_max_items": 100_000,  # both passes fit
            },
        )  # fmt: skip
        await create_topics(connection_for(settings), load_topic_specs(prefix))
        metrics = Metrics()
        backend = default_backend(settings)
        service = build_service(settings, backend, metrics=metrics)
        task = asyncio.create_task(service.run())
        rows: list[PassRow] = []
        try:
            await asyncio.wait_for(service.processor.assigned.wait(), 60)
            for name, texts in (("first", first), ("edited", second)):
                records = [
                    (f"doc-{d}".encode(), orjson.dumps({"doc_id": f"doc-{d}", "text": text}))
                    for d, text in enumerate(texts)
                ]
                rows.append(await one_pass(name, records, names, settings, metrics, simulator))
            chunks = rows[0].chunks
            rng = random.Random(ns.seed + 1)
            plain = [
                (f"r{i}".encode(), orjson.dumps({"id": f"r{i}", "text": paragraph(rng, 160)}))
                for i in range(chunks)
            ]
            rows.append(await one_pass("plain", plain, names, settings, metrics, simulator))
        finally:
            service.stop()
            await asyncio.wait_for(task, 60)
            await backend.close()
            await delete_topics(ns.bootstrap, await list_topics(ns.bootstrap, prefix))
    base = rows[0]
    print(f"{ns.docs} documents x {ns.paragraphs} paragraphs, {ns.edited:.0%} edited (one "
          "paragraph each); cache=memory; one processor, one run")  # fmt: skip
    print(f"{'pass':<8}{'records':>9}{'chunks':>9}{'inputs':>9}{'tokens':>12}"
          f"{'tokens vs 1st':>15}{'seconds':>9}{'items/s':>10}")  # fmt: skip
    for row in rows:
        share = row.tokens / base.tokens if base.tokens else 0.0
        print(f"{row.name:<8}{row.records:>9,}{row.chunks:>9,}{row.inputs:>9,}"
              f"{row.tokens:>12,}{share:>15.2%}{row.seconds:>9.1f}{row.per_s:>10,.0f}")  # fmt: skip
    ratio = rows[0].per_s / rows[2].per_s
    print(f"documents' chunks/s vs plain items/s: {ratio:.2f}x")


async def one_pass(
    name: str,
    records: list[tuple[bytes, bytes]],
    names: TopicNames,
    settings: Settings,
    metrics: Metrics,
    simulator: SimulatorServer,
) -> PassRow:
    documents = name != "plain"
    before_tokens, before_inputs = simulator.stats.tokens, simulator.stats.inputs
    chunks_before = sample(metrics, "embedstream_chunks_total")

    def finished() -> float:
        if documents:
            return sum(
                sample(metrics, "embedstream_documents_total", {"outcome": o})
                for o in ("complete", "incomplete")
            )
        return sum(
            sample(metrics, "embedstream_results_total", {"lane": lane}) for lane in ("high", "low")
        )

    target = finished() + len(records)
    started = time.perf_counter()
    await publish(settings.bootstrap_servers, names.requests_low, records)
    while finished() < target:  # noqa: ASYNC110 (a metric to poll, no event to wait on)
        await asyncio.sleep(0.02)
    seconds = time.perf_counter() - started
    chunks = int(sample(metrics, "embedstream_chunks_total") - chunks_before)
    return PassRow(
        name=name,
        records=len(records),
        chunks=chunks if documents else len(records),
        inputs=simulator.stats.inputs - before_inputs,
        tokens=simulator.stats.tokens - before_tokens,
        seconds=seconds,
    )


if __name__ == "__main__":
    asyncio.run(main())
