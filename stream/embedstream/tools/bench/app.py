"""`embedstream bench`: start the simulated provider, run the chosen scenarios, print the
table and the recommended settings, and write the JSON and plots asked for.

Every check that can fail without measuring (a missing extra, an unwritable output, a bad
setting, a broker that does not answer) runs first, so a mistake costs one line, not a run.
A scenario that fails is reported and the others still run (exit status 1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import logging
import os
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from embedstream.errors import EmbedStreamError
from embedstream.ops.logs import setup_logging
from embedstream.settings import Settings, load_settings, validate
from embedstream.tools.bench import BenchError
from embedstream.tools.bench.context import BenchContext, ScenarioResult
from embedstream.tools.bench.documents_scenario import documents_scenario
from embedstream.tools.bench.extras import EXTRA_SCENARIOS
from embedstream.tools.bench.figures import (
    PROVIDER_MAX_INPUTS,
    PROVIDER_MAX_TOKENS,
    LatencyModel,
)
from embedstream.tools.bench.finish import Runner, finish_run
from embedstream.tools.bench.kafka_fairness import kafka_fairness
from embedstream.tools.bench.kafka_figures import stage_rows
from embedstream.tools.bench.kafka_flood import kafka_flood, kafka_floor
from embedstream.tools.bench.kafka_mixed import kafka_mixed
from embedstream.tools.bench.kafka_online import kafka_online
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    PoissonVariant,
    kafka_backlog,
    kafka_poisson,
)
from embedstream.tools.bench.options import (
    BENCH_SETTINGS,
    DOC_PARAGRAPHS,
    HTTP_PATHS,
    KAFKA_SCENARIOS,
    PoissonArm,
    Sizes,
    sizes_from_args,
)
from embedstream.tools.bench.plots import require_matplotlib
from embedstream.tools.bench.processes import SimulatorProcess
from embedstream.tools.bench.scaleout import scale_out
from embedstream.tools.bench.scenarios import backlog, closed_loop, endpoint, open_loop
from embedstream.tools.bench.timeline import Timeline
from embedstream.tools.embedded import EmbeddedBroker
from embedstream.tools.progress import make_step_progress

log = logging.getLogger(__name__)
T = TypeVar("T")


def latency_model(ns: argparse.Namespace) -> LatencyModel:
    try:
        return LatencyModel(
            ns.base_ms, ns.per_token_ms, ns.per_input_ms, ns.capacity, ns.rpm, ns.tpm
        )
    except ValueError as exc:
        raise BenchError(f"latency model: {exc}") from exc


def engine_settings(ns: argparse.Namespace, model: LatencyModel) -> Settings:
    """The engine's settings: the library's defaults, then the bench's (what reaching the
    bound takes: the provider's largest batch, one call per provider slot; the buffer then
    holds two full batches a slot), then --config, then the flags. The environment is not read:
    a run is reproducible from its command line."""
    bench_defaults: dict[str, Any] = {
        "max_batch_size": PROVIDER_MAX_INPUTS,
        "max_batch_tokens": PROVIDER_MAX_TOKENS,
        "max_concurrency": model.capacity,
        "log_level": "WARNING",
    }
    in_file = _file_keys(ns.config)
    overrides = {k: v for k, v in bench_defaults.items() if k not in in_file}
    for name in BENCH_SETTINGS:
        if getattr(ns, name, None) is not None:
            overrides[name] = getattr(ns, name)
    return load_settings(env={}, file=ns.config, overrides=overrides)


def _file_keys(path: Path | None) -> set[str]:
    if path is None:
        return set()
    with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
        return set(tomllib.loads(path.read_text(encoding="utf-8")))
    return set()  # load_settings reports the unreadable file, naming it


def _check_outputs(ns: argparse.Namespace) -> None:
    if ns.plots is not None:
        require_matplotlib()
    if ns.json is not None and not ns.json.parent.is_dir():
        raise BenchError(f"--json {ns.json}: no directory {ns.json.parent}")


def _wants_kafka(ns: argparse.Namespace) -> bool:
    kafka = any(name in KAFKA_SCENARIOS for name in ns.scenarios) or ns.scale_out
    return kafka or any(e.wanted(ns) and e.needs_kafka(ns) for e in EXTRA_SCENARIOS)


@contextlib.asynccontextmanager
async def kafka_broker(ns: argparse.Namespace, settings: Settings) -> AsyncIterator[KafkaBroker]:
    """The broker of the Kafka scenarios: --bootstrap (checked now) or an embedded one."""
    if ns.bootstrap:
        from embedstream.kafka.client.clients import check_broker

        await check_broker(dataclasses.replace(settings, bootstrap_servers=ns.bootstrap))
        yield KafkaBroker(ns.bootstrap, embedded=False)
        return
    embedded = EmbeddedBroker()
    try:
        await embedded.start()
    except EmbedStreamError as exc:
        raise BenchError(
            f"{exc}; or pass --bootstrap HOST:PORT of an Apache Kafka broker, or leave the "
            "Kafka scenarios out (--scenarios in-process)"
        ) from exc
    try:
        yield KafkaBroker(embedded.bootstrap, embedded=True)
    finally:
        embedded.stop()


async def run_bench_from_args(ns: argparse.Namespace) -> int:
    model = latency_model(ns)
    settings = engine_settings(ns, model)
    setup_logging(settings.log_level, settings.log_format)
    sizes = sizes_from_args(ns)
    _check_outputs(ns)
    api_key = ns.api_key or os.environ.get("OPENAI_API_KEY")
    log_dir = Path(tempfile.mkdtemp(prefix="embedstream-bench-"))
    progress = make_step_progress(sys.stderr)
    started = time.perf_counter()
    runner = Runner()
    simulator = SimulatorProcess(
        model, dimensions=ns.dimensions, burst_s=ns.burst_s, log_dir=log_dir
    )
    simulated = bool(ns.scenarios) or ns.scale_out or any(e.wanted(ns) for e in EXTRA_SCENARIOS)
    try:
        async with contextlib.AsyncExitStack() as stack:
            broker = None
            if _wants_kafka(ns):
                broker = await stack.enter_async_context(kafka_broker(ns, settings))
            ctx = BenchContext(
                settings, model, ns.tokens, ns.seed, progress, log_dir, provider=simulator
            )
            if simulated:
                await simulator.start()
                stack.callback(simulator.stop)
                ctx.settings = _with_provider(settings, simulator.base_url, None)
                await _simulated(ns, ctx, sizes, broker, runner)
            if ns.endpoint:
                real = BenchContext(
                    _with_provider(settings, ns.endpoint, api_key),
                    None, ns.tokens, ns.seed, progress, log_dir,
                )  # fmt: skip
                measured = await runner.attempt(
                    "endpoint", lambda: endpoint(real, sizes.callers, ns.budget)
                )
                runner.results += measured or []
    finally:
        progress.close()
    wall_s = time.perf_counter() - started
    return finish_run(ns, model, settings, sizes, runner, log_dir, wall_s)


def _with_provider(settings: Settings, base_url: str, api_key: str | None) -> Settings:
    changed = dataclasses.replace(settings, base_url=base_url, api_key=api_key)
    validate(changed)
    return changed


async def _simulated(
    ns: argparse.Namespace,
    ctx: BenchContext,
    sizes: Sizes,
    broker: KafkaBroker | None,
    runner: Runner,
) -> None:
    for label, step in _steps(ns, sizes, broker):
        for sdk in HTTP_PATHS[ns.http_path]:
            arm = dataclasses.replace(ctx, sdk=sdk)
            suffix = " (sdk)" if sdk and ns.http_path == "both" else ""
            results = await runner.attempt(label + suffix, functools.partial(step, arm))
            runner.results += [_renamed(r, suffix) for r in results or []]
    if ns.scale_out and broker is not None:
        items = sizes.scale_out_items
        rows = await runner.attempt(
            "scale-out", lambda: scale_out(ctx, broker, ns.processors, items)
        )
        runner.scale_rows += rows or []
    for extra in EXTRA_SCENARIOS:
        if extra.wanted(ns):
            run_extra = functools.partial(extra.run, ns, ctx, broker)
            runner.results += await runner.attempt(extra.name, run_extra) or []


Step = Callable[[BenchContext], Awaitable[list[ScenarioResult]]]


def _steps(
    ns: argparse.Namespace, sizes: Sizes, broker: KafkaBroker | None
) -> list[tuple[str, Step]]:
    """The chosen scenarios in running order, each a function of the context it runs in."""

    def one(run: Callable[[BenchContext], Awaitable[ScenarioResult]]) -> Step:
        async def as_list(ctx: BenchContext) -> list[ScenarioResult]:
            return [await run(ctx)]

        return as_list

    steps: list[tuple[str, Step]] = []
    chosen = ns.scenarios
    if "closed" in chosen:
        steps.append(
            ("closed", one(lambda c: closed_loop(c, sizes.callers, seconds=sizes.seconds)))
        )
    if "backlog" in chosen:
        steps.append(("backlog", one(lambda c: backlog(c, sizes.backlog_items))))
    if "open" in chosen:
        for rate in sizes.rates:
            run = functools.partial(_open, rate=rate, seconds=sizes.seconds)
            steps.append((f"open {rate:g}/s", one(run)))
    if broker is None:
        return steps
    if "kafka-backlog" in chosen:
        steps.append(("kafka backlog", one(lambda c: kafka_backlog(c, broker, sizes.kafka_items))))
    if "kafka-poisson" in chosen:
        arms = [PoissonVariant(), *(_variant(arm) for arm in ns.poisson_ab)]
        for variant in arms:
            poisson = functools.partial(_poisson, broker=broker, sizes=sizes, variant=variant,
                                    timeline=ns.timeline)  # fmt: skip
            steps.append((f"kafka poisson{variant.label}", poisson))
    if "kafka-flood" in chosen:
        rate = sizes.flood_high_rate
        flood = functools.partial(kafka_flood, broker=broker, low_items=sizes.flood_items,
                                  high_rate=rate, stages=ns.timeline)  # fmt: skip
        steps.append(("kafka flood", flood))
    if "kafka-floor" in chosen:
        items = sizes.floor_items
        steps.append(("kafka floor", lambda c: kafka_floor(c, broker, items, ns.dimensions)))
    if "documents" in chosen:
        docs = sizes.docs
        steps.append(("documents", lambda c: documents_scenario(c, broker, docs, DOC_PARAGRAPHS)))
    if "kafka-fairness" in chosen:
        fair = (sizes.fairness_items, sizes.fairness_rate, sizes.fairness_seconds)
        steps.append(("kafka fairness", lambda c: kafka_fairness(c, broker, *fair)))
    if "kafka-mixed" in chosen:
        mixed = functools.partial(kafka_mixed, broker=broker, items=sizes.mixed_items,
                                  stages=ns.timeline)  # fmt: skip
        steps.append(("kafka mixed", mixed))
    if "online" in chosen:
        online = functools.partial(kafka_online, broker=broker, low_items=sizes.online_items,
                                   rate=sizes.online_rate)  # fmt: skip
        steps.append(("online", online))
    return steps


async def _closed(ctx: BenchContext, *, callers: int, seconds: float) -> ScenarioResult:
    return await closed_loop(ctx, callers, seconds=seconds)


async def _open(ctx: BenchContext, *, rate: float, seconds: float) -> ScenarioResult:
    return await open_loop(ctx, rate, seconds)


def _variant(arm: PoissonArm) -> PoissonVariant:
    return PoissonVariant(f" ({arm.text})", arm.settings, arm.result_linger_ms)


async def _poisson(
    ctx: BenchContext,
    *,
    broker: KafkaBroker,
    sizes: Sizes,
    variant: PoissonVariant,
    timeline: bool,
) -> list[ScenarioResult]:
    """kafka-poisson, with a row per stage of the requests' timeline when asked for."""
    noted = Timeline() if timeline else None
    rate, seconds = sizes.kafka_rate, sizes.kafka_seconds
    result = await kafka_poisson(ctx, broker, rate, seconds, variant=variant, timeline=noted)
    if noted is None:
        return [result]
    measured = {i: m for i, m in noted.moments.items() if i.startswith("poisson-")}
    stages = stage_rows(measured, f"  {result.row.scenario}", result.row.seconds)
    return [result, *(ScenarioResult(row) for row in stages)]


def _renamed(result: ScenarioResult, suffix: str) -> ScenarioResult:
    if not suffix:
        return result
    row = dataclasses.replace(result.row, scenario=result.row.scenario + suffix)
    return dataclasses.replace(result, row=row)
