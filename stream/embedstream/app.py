"""Wires the processor together: fail-fast checks, signals, graceful drain."""

from __future__ import annotations

import asyncio
import logging
import signal

from embedstream.config import Settings
from embedstream.engine.embedder import EmbeddingBackend, OpenAIEmbedder
from embedstream.kafka.clients import check_broker
from embedstream.kafka.processor import Processor

log = logging.getLogger(__name__)


def default_backend(settings: Settings) -> EmbeddingBackend:
    return OpenAIEmbedder(
        base_url=settings.base_url, api_key=settings.api_key, timeout_s=settings.request_timeout_s
    )


async def run_processor(
    settings: Settings,
    backend: EmbeddingBackend | None = None,
    *,
    handle_signals: bool = True,
    started: asyncio.Event | None = None,
) -> Processor:
    """Run one group member until SIGINT/SIGTERM (or `processor.stop()`), then drain and exit."""
    await check_broker(settings)  # before anything is consumed: names bootstrap_servers
    backend = backend or default_backend(settings)
    processor = Processor(settings, backend)
    loop = asyncio.get_running_loop()
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _on_signal, processor, sig)
    log.info("embedstream starting: %s", settings.describe())
    if started is not None:
        started.set()
    try:
        await processor.run()
    finally:
        await backend.close()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    log.info("embedstream stopped cleanly")
    return processor


def _on_signal(processor: Processor, sig: signal.Signals) -> None:
    log.info("received %s: finishing in-flight work, then exiting", sig.name)
    processor.stop()
