"""A processor's service: the processor with its health loop and ops server, started and
stopped together. Built by `embedstream.app.processor.build_service`."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from embedstream.engine.bounded import bounded, in_daemon_thread
from embedstream.engine.registry import RegistryClient
from embedstream.engine.result_schema import ResultSchemaRegistration
from embedstream.kafka.consumption.processor_loop import Processor
from embedstream.ops.health import Health
from embedstream.ops.metrics import Metrics
from embedstream.ops.server import OpsServer

if TYPE_CHECKING:
    from embedstream.app.batch_jobs import BatchJobs
    from embedstream.app.store_watch import StoreWatch

log = logging.getLogger(__name__)


class Service:
    """A processor with its health loop and ops server: what `embedstream run` runs (each
    processor child of it, when it runs the online lane too)."""

    def __init__(
        self,
        processor: Processor,
        health: Health,
        ops_server: OpsServer | None,
        registry: RegistryClient | None = None,
        result_schema: ResultSchemaRegistration | None = None,
        metrics: Metrics | None = None,
        watch: StoreWatch | None = None,
        *,
        batch: BatchJobs | None = None,
    ) -> None:
        self.processor = processor
        self.watch = watch  # the store's generations followed (with store_dsn)
        self.batch = batch  # its batch jobs' watcher (app/batch_jobs.py)
        self.metrics = metrics or Metrics()  # what its ops server exposes
        self.health = health
        self.ops_server = ops_server
        self.registry = registry  # the schema registry, with a registry input or output format
        self.result_schema = result_schema  # with a registry output format

    async def wait_assigned(self) -> None:
        """Until the processor holds partitions."""
        await self.processor.assigned.wait()

    @property
    def metrics_port(self) -> int | None:
        return self.ops_server.port if self.ops_server is not None else None

    def stop(self) -> None:
        self.processor.stop()

    async def run(self) -> None:
        settings = self.processor.parts.settings
        try:
            if self.ops_server is not None:  # first: /healthz answers from process start
                await self.ops_server.start(settings.metrics_host, settings.metrics_port)
        except BaseException:  # a port taken: the one-line error, nothing left open behind it
            if self.ops_server is not None:
                await self.ops_server.stop()
            await self.processor.close_unstarted()
            raise
        health_task = asyncio.create_task(self._health())
        try:
            if self.result_schema is not None:  # before anything is consumed
                encoder = await self.result_schema.encoder(self.processor.stopping)
                if self.processor.stopping.is_set():  # while the registry was out
                    await self.processor.close_unstarted()
                    return
                self.processor.parts.outcomes.result_writer.result_values = encoder
                changelog = self.processor.parts.outcomes.documents.changelog
                if changelog is not None and self.result_schema.changelog_values is not None:
                    changelog.values = self.result_schema.changelog_values
            runs = [self.processor.run()]
            if self.watch is not None:  # the store's generations first: dual-written at once
                await self.watch.refresh()
                runs.append(self.watch.run(self.processor.stopping))
            if self.batch is not None:
                stopping, started = self.processor.stopping, self.processor.clients_started
                runs.append(self.batch.run(stopping, started))
            await asyncio.gather(*runs)
        finally:
            # The spans still buffered, exported off the loop (a collector in this process
            # would otherwise wait on the loop that waits on it). Each step has a deadline,
            # from the time the processor's closes share (engine/bounded.py).
            step_s = self.processor.closing.step_s
            export = in_daemon_thread(self.processor.parts.tracer.close)
            await bounded(export, step_s(), "exporting the last spans")
            health_task.cancel()
            await bounded(health_task, step_s(), "the health loop's end")
            if self.ops_server is not None:
                await bounded(self.ops_server.stop(), step_s(), "the ops server's stop")
            if self.registry is not None:
                await bounded(self.registry.close(), step_s(), "the registry client's close")

    async def _health(self) -> None:
        # Probing the broker through a producer that has not bootstrapped yet fails (and
        # aiokafka logs it): the first probe waits for the clients.
        await self.processor.clients_started.wait()
        await self.health.run()
