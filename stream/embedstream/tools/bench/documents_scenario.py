"""The documents scenario of `embedstream bench` (issue 18): what an edit costs, and
documents' chunks/s beside plain requests' items/s, in one run on one broker.

One processor with cache=memory (it must live across the passes, and hold every chunk of the
first) reads three passes in turn from its low topic: ``docs`` documents of ``paragraphs``
paragraphs (about one chunk each at the default chunking rules); the same documents again
with one word of one paragraph edited in a share of them (a new version each: the chunker's
cuts are local, so only the chunks around the edit are new texts and the rest are cache
answers); then plain requests, as many distinct paragraph-sized texts as the first pass had
chunks. Each pass is timed from its first publication to its last ending (documents: complete
or incomplete; requests: results). Tokens are the simulator's own count of what it was sent.
The rows are built by the pure ``documents_figures``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence

import orjson

from embedstream.engine.cache_tiers import SIZING_ENTRY_BYTES
from embedstream.kafka.client.clients import connection_for, producer_for
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, validate
from embedstream.tools.bench.context import BenchContext, ScenarioResult, reporting
from embedstream.tools.bench.documents_figures import (
    DocumentPass,
    document_rows,
    make_documents,
    plain_texts,
)
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    running_processor,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.scenarios import GRACE_S

PUBLISH_CHUNK = 2000
POLL_S = 0.02
EDITED_SHARE = 0.1
# A pass may take this long per work item beyond the grace period before it counts as stuck.
PASS_S_PER_ITEM = 1 / 200


async def publish_records(
    settings: Settings, topic: str, records: Sequence[tuple[bytes, bytes]]
) -> None:
    """Every (key, value) on ``topic``, in big producer batches, all acknowledged."""
    producer = producer_for(connection_for(settings), linger_ms=20, max_batch_size=1_048_576)
    await producer.start()
    try:
        for start in range(0, len(records), PUBLISH_CHUNK):
            chunk = records[start : start + PUBLISH_CHUNK]
            await asyncio.gather(*[await producer.send(topic, v, key=k) for k, v in chunk])
    finally:
        await producer.stop()


def document_records(texts: Sequence[str]) -> list[tuple[bytes, bytes]]:
    return [
        (f"doc-{d}".encode(), orjson.dumps({"doc_id": f"doc-{d}", "text": text}))
        for d, text in enumerate(texts)
    ]


def request_records(texts: Sequence[str]) -> list[tuple[bytes, bytes]]:
    return [
        (f"r{i}".encode(), orjson.dumps({"id": f"r{i}", "text": text}))
        for i, text in enumerate(texts)
    ]


def _counter(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.registry.get_sample_value(name, labels or {}) or 0.0


def documents_ended(metrics: Metrics) -> float:
    return sum(
        _counter(metrics, "embedstream_documents_total", {"outcome": outcome})
        for outcome in ("complete", "incomplete")
    )


def results_written(metrics: Metrics) -> float:
    return sum(
        _counter(metrics, "embedstream_results_total", {"lane": lane}) for lane in ("high", "low")
    )


def cached_settings(base: Settings, items: int) -> Settings:
    """``base`` with an in-process cache that holds every chunk of the first pass (vectors of
    up to 1536 dimensions)."""
    room = max(base.cache_max_bytes, 2 * items * SIZING_ENTRY_BYTES)
    settings = dataclasses.replace(base, cache="memory", cache_max_bytes=room)
    validate(settings)
    return settings


async def _tokens_sent(ctx: BenchContext) -> int:
    if ctx.provider is None:
        return 0
    stats = await ctx.provider.stats()
    return int(stats.get("tokens", 0))


async def _one_pass(
    ctx: BenchContext,
    name: str,
    records: Sequence[tuple[bytes, bytes]],
    topic: str,
    settings: Settings,
    metrics: Metrics,
    backend: TimedBackend,
    *,
    documents: bool,
    expected_items: int,
) -> DocumentPass:
    ended: Callable[[], float] = (
        (lambda: documents_ended(metrics)) if documents else (lambda: results_written(metrics))
    )
    before_ended, before_chunks = ended(), _counter(metrics, "embedstream_chunks_total")
    before_tokens = await _tokens_sent(ctx)
    target = before_ended + len(records)
    backend.restart()
    cpu = CpuMeter(ctx.provider_cpu())

    def done() -> float:
        return ended() - before_ended

    async with reporting(ctx.progress, f"documents: {name} pass", len(records), "events", done):
        cpu.start()
        started = time.perf_counter()
        await publish_records(settings, topic, records)
        deadline = started + GRACE_S + expected_items * PASS_S_PER_ITEM
        while ended() < target and time.perf_counter() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(POLL_S)
        seconds = time.perf_counter() - started
        cpu.stop()
    chunks = int(_counter(metrics, "embedstream_chunks_total") - before_chunks)
    return DocumentPass(
        name=name,
        records=len(records),
        items=chunks if documents else int(done()),
        ended=int(done()),
        inputs=backend.inputs,
        tokens=await _tokens_sent(ctx) - before_tokens,
        calls=backend.calls,
        seconds=seconds,
        cpu_s=cpu.client_s,
        provider_cpu_s=cpu.provider_s,
    )


async def documents_scenario(
    ctx: BenchContext, broker: KafkaBroker, docs: int, paragraphs: int
) -> list[ScenarioResult]:
    first, edited = make_documents(docs, paragraphs, EDITED_SHARE, ctx.seed)
    base = broker.settings(ctx.settings, unique_prefix("documents"))
    settings = cached_settings(base, docs * paragraphs)
    metrics = Metrics()
    backend = TimedBackend(ctx.embedder(settings))
    passes: list[DocumentPass] = []
    async with (
        scenario_topics(settings) as names,
        running_processor(settings, backend, metrics),
    ):
        for name, texts in (("first", first), ("edited", edited)):
            passes.append(
                await _one_pass(ctx, name, document_records(texts), names.requests_low,
                                settings, metrics, backend, documents=True,
                                expected_items=docs * paragraphs)
            )  # fmt: skip
            ctx.progress.end(f"{passes[-1].items:,} chunks, {passes[-1].tokens:,} tokens")
        plain = request_records(plain_texts(passes[0].items, ctx.seed))
        passes.append(
            await _one_pass(ctx, "plain", plain, names.requests_low, settings, metrics, backend,
                            documents=False, expected_items=len(plain))
        )  # fmt: skip
        ctx.progress.end(f"{passes[-1].per_s:,.0f} items/s")
    rows = document_rows(passes, docs, paragraphs, EDITED_SHARE, broker.name)
    return [ScenarioResult(row) for row in rows]
