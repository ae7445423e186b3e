"""The shell of ``embedstream demo``: broker, provider, processor, the phases, the summary.

Starts the embedded broker and the simulated provider on free loopback ports (or uses a real
endpoint when OPENAI_API_KEY / OPENAI_BASE_URL are set), creates the topics and runs one
processor in this process. Each request phase (planned by
:mod:`embedstream.tools.demo.phases`, run by :mod:`embedstream.tools.demo.publishing`)
publishes its requests and waits until the processor's metrics registry counts an outcome for
every one; the registry is read at both ends of the phase. The documents phase
(:mod:`embedstream.tools.demo.documents_phase`) publishes documents, then edits of some and a
delete, each pass waited for by its endings in the registry. Then the topics are read back
and checked as ``embedstream verify`` would, and :mod:`embedstream.tools.demo.summary` turns
it all into tables. With ``--live`` the top view (:mod:`embedstream.tools.top`) watches the
processor's /metrics while the phases run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TextIO, TypeVar

import orjson
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from rich.console import Console

from embedstream.app.processor import build_service, default_backend
from embedstream.app.service import Service
from embedstream.engine.backend import EmbeddingBackend
from embedstream.errors import EmbedStreamError
from embedstream.kafka.client.admin import configured_specs, configured_topics, create_topics
from embedstream.kafka.client.clients import connection_for, make_producer
from embedstream.kafka.client.protocols import Producer
from embedstream.ops.logs import setup_logging
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, load_settings
from embedstream.tools.demo.documents_phase import (
    DocumentFigures,
    DocumentPlan,
    document_figures,
    document_plan,
    documents_lines,
    documents_ok,
)
from embedstream.tools.demo.options import (
    DEFAULT_BACKLOG_ITEMS,
    DEFAULT_DOCUMENTS,
    DEFAULT_HIGH_RATE,
    DEFAULT_SPARSE_ITEMS,
    DEFAULT_SPARSE_RATE,
    DEFAULT_TIMEOUT_S,
)
from embedstream.tools.demo.phases import RequestPhase, plan
from embedstream.tools.demo.publishing import POLL_S, Measured, PhasePublisher
from embedstream.tools.demo.summary import (
    Outcomes,
    PhaseFigures,
    latencies_by_phase,
    measure,
    render,
)
from embedstream.tools.demo.texts import text_stream
from embedstream.tools.embedded import EmbeddedBroker, free_port
from embedstream.tools.top import run_top
from embedstream.tools.top.readings import snapshot_of
from embedstream.tools.verify.app import read_back

LIVE_INTERVAL_S = 1.0
_JOIN_TIMEOUT_S = 60.0
_READ_BACK_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_DOCUMENT_COUNTER = "embedstream_documents_total"

log = logging.getLogger(__name__)

T = TypeVar("T")


async def run_demo_from_args(ns: argparse.Namespace) -> int:
    if ns.rag:
        from embedstream.tools.demo.rag import DEFAULT_QUESTIONS, run_rag_demo

        return await run_rag_demo(
            ns.question or DEFAULT_QUESTIONS, bootstrap=ns.bootstrap, k=ns.k, timeout_s=ns.timeout
        )
    return await run_demo(
        items=ns.items,
        sparse_items=ns.sparse_items,
        sparse_rate=ns.sparse_rate,
        documents=ns.documents,
        high_rate=ns.high_rate,
        timeout_s=ns.timeout,
        metrics_port=ns.metrics_port,
        live=ns.live,
    )


async def run_demo(
    items: int = DEFAULT_BACKLOG_ITEMS,
    sparse_items: int = DEFAULT_SPARSE_ITEMS,
    sparse_rate: float = DEFAULT_SPARSE_RATE,
    documents: int = DEFAULT_DOCUMENTS,
    *,
    high_rate: float = DEFAULT_HIGH_RATE,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    metrics_port: int = 0,
    live: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the phases and print the summary to ``out``; 0 when every request has exactly
    one result and every document ended as the contract says, 1 otherwise."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    phases = plan(sparse_items, sparse_rate, items, high_rate)
    on_screen = live and out.isatty()  # the full-screen view owns the terminal meanwhile

    def say(line: str) -> None:
        if not on_screen:
            print(line, file=err, flush=True)

    broker = EmbeddedBroker()
    await broker.start()
    simulator: SimulatorServer | None = None
    backend: EmbeddingBackend | None = None
    real_endpoint = bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
    try:
        overrides: dict[str, object] = {
            "bootstrap_servers": broker.bootstrap,
            "topic_prefix": "demo.",
            "group_id": "embedstream-demo",
            # The embedded broker holds each fetch for fetch_max_wait_ms and each join for
            # about half the session timeout: keep both short.
            "fetch_max_wait_ms": 10,
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "metrics_port": metrics_port or (free_port() if live else 0),
        }
        if not real_endpoint:
            provider = SimulatorConfig(base_ms=20.0, per_token_ms=0.002, capacity=8)
            simulator = SimulatorServer(provider)
            await simulator.start()
            overrides["base_url"] = simulator.url
        settings = load_settings(env=os.environ, overrides=overrides)
        # Library warnings only (DEBUG if asked for): the demo's own lines say what happens.
        level = "DEBUG" if settings.log_level == "DEBUG" else "WARNING"
        setup_logging(level, settings.log_format, settings.secret_values())
        where = "a real endpoint" if real_endpoint else f"the simulator at {settings.base_url}"
        say(f"embedded broker at {broker.bootstrap}; embeddings from {where}")
        await create_topics(connection_for(settings), configured_specs(settings))
        metrics = Metrics()
        backend = default_backend(settings)
        service = build_service(settings, backend, metrics=metrics)
        docs = document_plan(documents) if documents else None
        demo = _Demo(settings, service, metrics, phases, docs, say)
        measured = await _with_service(service, demo.run(live, out), timeout_s)
        # The processor has stopped: nothing is written any more, and checking thousands of
        # vectors (CPU-bound, seconds) cannot starve its heartbeats.
        figures, outcomes, doc_figures = await demo.read_back(
            measured, check_vectors=not real_endpoint
        )
        cache_on = settings.cache != "off"
        console = Console(file=out, highlight=False)
        console.print(render(figures, outcomes, cache_on=cache_on))
        if doc_figures is not None:
            console.print(documents_lines(doc_figures, cache_on=cache_on))
        docs_ok = doc_figures is None or documents_ok(doc_figures)
        return 0 if outcomes.ok and docs_ok else 1
    finally:
        if backend is not None:
            await backend.close()  # its HTTP session, before the loop ends
        if simulator is not None:
            await simulator.stop()
        broker.stop()


async def _with_service(service: Service, work: Awaitable[T], timeout_s: float) -> T:
    """Run ``work`` while the service runs; a service that stops first ends the demo with
    its error, and so does the timeout. The service is stopped (drained) either way."""
    run_task = asyncio.create_task(service.run())
    work_task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait(
            {run_task, work_task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if work_task in done:
            return work_task.result()
        if run_task in done:
            run_task.result()  # raises what stopped it
            raise EmbedStreamError("the demo's processor stopped before the demo was done")
        raise EmbedStreamError(f"the demo did not finish within {timeout_s:g}s (--timeout)")
    finally:
        work_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work_task
        service.stop()
        if not run_task.done():
            try:
                await asyncio.wait_for(run_task, _STOP_TIMEOUT_S)
            except Exception as exc:  # the figures are in: say so, but show them
                log.warning("the demo's processor did not stop cleanly: %r", exc)


class _Demo:
    def __init__(
        self,
        settings: Settings,
        service: Service,
        metrics: Metrics,
        phases: Sequence[RequestPhase],
        documents: DocumentPlan | None,
        say: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.service = service
        self.metrics = metrics
        self.phases = phases
        self.documents = documents
        self.documents_s = 0.0
        self.say = say
        self.names = configured_topics(settings)

    async def run(self, live: bool, out: TextIO) -> list[Measured]:
        """The phases, with the top view on ``out`` meanwhile if ``live``."""
        top: asyncio.Task[int] | None = None
        try:
            try:
                await asyncio.wait_for(self.service.wait_assigned(), _JOIN_TIMEOUT_S)
            except TimeoutError:
                raise EmbedStreamError(
                    f"the demo's processor was given no partitions within {_JOIN_TIMEOUT_S:g}s"
                ) from None
            if live:
                target = f"127.0.0.1:{self.service.metrics_port}"
                top = asyncio.create_task(
                    run_top([target], LIVE_INTERVAL_S, None, out, clear=out.isatty())
                )
            return await self._phases()
        finally:
            if top is not None:
                top.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await top

    async def read_back(
        self, measured: Sequence[Measured], *, check_vectors: bool
    ) -> tuple[list[PhaseFigures], Outcomes, DocumentFigures | None]:
        """Every request's outcome, read from the topics, each phase's figures and the
        documents phase's."""
        self.say("reading back requests, results and dead letters ...")
        found = await read_back(
            connection_for(self.settings),
            self.names,
            timeout_s=_READ_BACK_TIMEOUT_S,
        )
        report = await asyncio.to_thread(
            found.report, check_vectors=check_vectors, default_model=self.settings.model
        )
        latencies = latencies_by_phase(found.results, [m.phase for m in measured])
        figures = [
            measure(m.phase, m.before, m.after, m.seconds, latencies[m.phase.name], m.lane_seconds)
            for m in measured
        ]
        docs = None
        if self.documents is not None and report.documents is not None:
            docs = document_figures(
                self.documents, found.document_records, report.documents, self.documents_s
            )
        return figures, Outcomes.from_report(report), docs

    async def _phases(self) -> list[Measured]:
        loop = asyncio.get_running_loop()
        texts = text_stream()  # one text per request, in the order of their numbers
        producer = make_producer(self.settings)
        await producer.start()
        publisher = PhasePublisher(producer, self.names, self.metrics.registry)
        measured = []
        try:
            for phase in self.phases:
                self.say(f"{phase.describe()} ...")
                measured.append(await publisher.run(phase, texts))
            if self.documents is not None:
                started = loop.time()
                await self._documents(producer, self.documents)
                self.documents_s = loop.time() - started
        finally:
            await producer.stop()
        return measured

    async def _documents(self, producer: Producer, plan: DocumentPlan) -> None:
        """The first pass, then the edit pass, each until the registry counts its endings."""
        counter = self.metrics.registry.restricted_registry([_DOCUMENT_COUNTER])
        for title, events in (("documents", plan.first), ("edits and a delete", plan.edits)):
            self.say(f"{title}: {len(events)} document events ...")
            ended = sum(snapshot_of(counter.collect()).documents.values()) + len(events)
            futures = []
            for event in events:
                doc = {"doc_id": event.doc_id, "text": event.text, "version": event.version}
                value = None if event.text is None else orjson.dumps(doc)
                topic = self.names.requests_low  # bulk ingestion
                futures.append(await producer.send(topic, value, key=event.doc_id.encode()))
            await asyncio.gather(*futures)
            while True:
                if sum(snapshot_of(counter.collect()).documents.values()) >= ended:
                    break
                await asyncio.sleep(POLL_S)
