"""Scenarios that other modules contribute to `embedstream bench`: the hook for `--cache`.

An extra adds its own options and runs after the built-in scenarios, with the same context
(engine settings, the simulated provider, progress) and, when any Kafka scenario runs, the
same broker. Its rows join the table, the JSON and the plots. To add one, implement
:class:`ExtraScenario` and list an instance in :data:`EXTRA_SCENARIOS`.

The intended first one is the cache scenario of ``bench/bench_cache.py``
(``bench.cache_scenario.run_cache_scenario``: ingest texts, then re-ingest them with
10% changed, on Apache Kafka and Redis). Its extra would add ``--cache``, be ``wanted`` when
that flag is given, and turn the two passes of its ``CacheScenario`` into two rows.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from embedstream.tools.bench.context import BenchContext, ScenarioResult
    from embedstream.tools.bench.kafka_scenarios import KafkaBroker


class ExtraScenario(Protocol):
    name: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its options (e.g. ``--cache``), with help texts and defaults."""

    def wanted(self, ns: argparse.Namespace) -> bool:
        """Whether this run asked for it."""

    def needs_kafka(self, ns: argparse.Namespace) -> bool:
        """Whether it needs the broker (started, or checked, before anything runs)."""

    async def run(
        self, ns: argparse.Namespace, ctx: BenchContext, broker: KafkaBroker | None
    ) -> list[ScenarioResult]:
        """Measure; one result per row of the table."""


EXTRA_SCENARIOS: tuple[ExtraScenario, ...] = ()
