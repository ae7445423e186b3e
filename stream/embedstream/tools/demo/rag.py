"""``embedstream demo --rag``: documents in, rows out, a question answered, with no API key.

One process runs the whole downstream path on this machine: the embedded broker (or the Kafka
cluster of ``--bootstrap``), the simulator serving real vectors from WordLlama's bundled
model, a throwaway PostgreSQL with pgvector, a processor and a store writer. The corpus that
ships with the package (``corpus/*.md``, one document each) is published keyed by doc_id;
once the store writer has recorded every document ``complete``, each question is embedded by
the same model and answered with the nearest chunks from the table. Nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import textwrap
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TextIO

import orjson
from embedsim.local_model import LocalModelUnavailable
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer

from embedstream.app.processor import build_service, default_backend
from embedstream.app.store_writer import build_store_writer, search_store
from embedstream.errors import EmbedStreamError
from embedstream.kafka.client.admin import configured_specs, configured_topics, create_topics
from embedstream.kafka.client.clients import connection_for, make_producer
from embedstream.ops.logs import setup_logging
from embedstream.ops.store_metrics import StoreMetrics
from embedstream.settings import Settings, load_settings
from embedstream.stores.base import SearchHit
from embedstream.tools.embedded import EmbeddedBroker
from embedstream.tools.local_postgres import PostgresUnavailable, start_postgres

RAG_MODEL = "wordllama-l2-supercat"
DEFAULT_QUESTIONS = (
    "How do bees tell each other where the flowers are?",
    "What makes an eruption explosive?",
)
DEFAULT_K = 3
_JOIN_TIMEOUT_S = 60.0
_POLL_S = 0.05
_STOP_TIMEOUT_S = 30.0
_COMPLETED = "embedstream_store_documents_completed_total"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorpusDocument:
    doc_id: str  # the file's name
    title: str  # its first line, without the heading mark
    text: str


def corpus() -> list[CorpusDocument]:
    """The documents shipped with the package, in name order."""
    folder = resources.files("embedstream.tools.demo") / "corpus"
    docs = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".md"):
            text = entry.read_text(encoding="utf-8")
            title = text.splitlines()[0].lstrip("# ").strip() if text else entry.name
            docs.append(CorpusDocument(entry.name, title, text))
    return docs


def rag_settings(bootstrap: str, base_url: str, dsn: str, prefix: str) -> Settings:
    """The demo's processor and store writer: short chunks (about a paragraph each, so an
    answer is a paragraph), their text kept in the results and the table."""
    return load_settings(
        env={k: v for k, v in os.environ.items() if k in ("EMBEDSTREAM_LOG_LEVEL",)},
        overrides={
            "bootstrap_servers": bootstrap,
            "topic_prefix": prefix,
            "group_id": prefix + "processor",
            "store_group_id": prefix + "sink",
            "base_url": base_url,
            "model": RAG_MODEL,
            "store_model": RAG_MODEL,
            "store_dsn": dsn,
            "store_table": "rag_demo",
            "include_chunk_text": True,
            "chunk_max_tokens": 128,
            "chunk_min_tokens": 32,
            "chunk_overlap_tokens": 0,
            # The embedded broker holds each fetch for fetch_max_wait_ms and each join for
            # about half the session timeout: keep both short.
            "fetch_max_wait_ms": 10,
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "max_wait_ms": 20,
            "metrics_port": 0,
        },
    )


async def run_rag_demo(
    questions: Sequence[str] = DEFAULT_QUESTIONS,
    *,
    bootstrap: str | None = None,
    k: int = DEFAULT_K,
    timeout_s: float = 300.0,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Ingest the corpus and answer ``questions``; 0 once every document is in the table."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    async with contextlib.AsyncExitStack() as stack:
        if bootstrap is None:
            broker = EmbeddedBroker()
            await broker.start()
            stack.callback(broker.stop)
            bootstrap, prefix, where = broker.bootstrap, "rag.", "embedded broker"
        else:  # someone's cluster: topics and groups of this run only
            prefix, where = f"rag-demo-{uuid.uuid4().hex[:8]}.", "Kafka"
        simulator = SimulatorServer(SimulatorConfig(model_backend="wordllama", base_ms=0))
        try:
            await simulator.start()
        except LocalModelUnavailable as exc:
            raise EmbedStreamError(str(exc)) from None
        stack.push_async_callback(simulator.stop)
        try:
            postgres = await asyncio.to_thread(start_postgres)
        except PostgresUnavailable as exc:
            raise EmbedStreamError(str(exc)) from None
        stack.callback(postgres.stop)
        settings = rag_settings(bootstrap, simulator.url, postgres.dsn, prefix)
        level = "DEBUG" if settings.log_level == "DEBUG" else "WARNING"
        setup_logging(level, settings.log_format, settings.secret_values())
        print(
            f"{where} at {bootstrap}; WordLlama ({RAG_MODEL}, 256 dimensions) at "
            f"{simulator.url}; PostgreSQL + pgvector at {postgres.directory}",
            file=err,
            flush=True,
        )
        await create_topics(connection_for(settings), configured_specs(settings))
        docs = corpus()
        chunks = await asyncio.wait_for(_ingest(settings, docs, err), timeout_s)
        print(f"{len(docs)} documents, {chunks} chunks in table rag_demo", file=out)
        for question in questions:
            hits = await search_store(settings, question, k)
            print(render_answer(question, hits), file=out, flush=True)
    return 0


async def _ingest(settings: Settings, docs: Sequence[CorpusDocument], err: TextIO) -> int:
    """Run a processor and a store writer until the store has every document complete;
    returns the chunks written."""
    store_metrics = StoreMetrics()
    backend = default_backend(settings)
    service = build_service(settings, backend)
    writer = build_store_writer(settings, metrics=store_metrics)
    tasks = [asyncio.create_task(service.run()), asyncio.create_task(writer.run())]
    try:
        await _first(tasks, service.wait_assigned(), "the processor joined")
        await _first(tasks, writer.feed.joined.wait(), "the store writer joined")
        print(f"publishing {len(docs)} documents ...", file=err, flush=True)
        await _publish(settings, docs)
        await _first(tasks, _completed(store_metrics, len(docs)), "every document was stored")
        chunks = store_metrics.registry.get_sample_value(
            "embedstream_store_rows_upserted_total", {"kind": "chunk"}
        )
        return int(chunks or 0)
    finally:
        service.stop()
        writer.stop()
        done, pending = await asyncio.wait(tasks, timeout=_STOP_TIMEOUT_S)
        for task in pending:
            task.cancel()
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.warning("a part of the RAG demo stopped with %r", task.exception())
        await backend.close()


async def _first(tasks: Sequence[asyncio.Task[None]], step: Awaitable[object], what: str) -> None:
    """Wait for ``step``; a processor or store writer that stops meanwhile ends the demo."""
    waiting = asyncio.ensure_future(step)
    try:
        done, _ = await asyncio.wait(
            [waiting, *tasks], timeout=_JOIN_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiting.cancel()
    if waiting in done:
        return
    for task in tasks:
        if task in done:
            task.result()  # raises what stopped it
            raise EmbedStreamError(f"a part of the RAG demo stopped before {what}")
    raise EmbedStreamError(f"the RAG demo waited {_JOIN_TIMEOUT_S:g}s for: {what}")


async def _publish(settings: Settings, docs: Sequence[CorpusDocument]) -> None:
    topic = configured_topics(settings).requests_high
    producer = make_producer(settings)
    await producer.start()
    try:
        futures = []
        for doc in docs:
            event = {"doc_id": doc.doc_id, "text": doc.text, "metadata": {"title": doc.title}}
            futures.append(await producer.send(topic, orjson.dumps(event), key=doc.doc_id.encode()))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _completed(metrics: StoreMetrics, documents: int) -> None:
    """Until the store writer has recorded ``documents`` final records (either outcome)."""
    counted = metrics.registry.restricted_registry([_COMPLETED])
    while True:
        done = sum(s.value for m in counted.collect() for s in m.samples if s.name == _COMPLETED)
        if done >= documents:
            return
        await asyncio.sleep(_POLL_S)


def render_answer(question: str, hits: Sequence[SearchHit]) -> str:
    """The question and its nearest chunks, nearest first, each with where it comes from."""
    lines = [f"\nQ: {question}"]
    for rank, hit in enumerate(hits, 1):
        lines.append(
            f"{rank}. {hit.doc_id} chunk {hit.chunk_seq} (cosine distance {hit.distance:.3f})"
        )
        text = " ".join((hit.text or "").split())
        lines.extend(textwrap.wrap(text, 96, initial_indent="   ", subsequent_indent="   "))
    return "\n".join(lines)
