"""Tail latency beside static batchers, in one run: the closed and open loops of issue 20.

    python bench/bench_tails.py                      # 3 rounds, 10 s per scenario and arm
    python bench/bench_tails.py --rounds 1 --seconds 3 --json tails.json
    python bench/bench_tails.py --arms embedstream,static-200-5ms
    python bench/bench_tails.py --arms embedstream --scenarios open-3000 --rounds 1 \
        --profile spy.txt                            # where the client's CPU goes (py-spy)

The scenarios are `embedstream bench`'s own (`closed_loop` and `open_loop` of
`embedstream.tools.bench.scenarios`: 50 callers; Poisson 1,000/s and 3,000/s, latency from
each item's scheduled arrival), against one simulated provider in a process of its own (the
bench's latency model: 40 ms + 0.02 ms/token, 8 calls at once, 30-token texts). Each arm is a
client behind the scenarios' surface on the same lean embedder and 8 call slots:

- ``embedstream``: `BatchingClient` with `embedstream bench`'s settings (``sdk``: the same
  on the openai SDK's HTTP path, the before arm of the lean path; ``nofill``: without the
  fill rule of core/policy.fill_target, its before arm);
- ``static-200-5ms``, ``static-64-50ms``: a static batcher that flushes at N items or T ms
  after the previous flush (faust's `take(max_, within)` timer), its batches queued for a
  free slot.

Rounds are interleaved (every scenario runs every arm once per round, the arms' order turned
by one each round), so a machine's changing load falls on every arm; the report gives each
round's figures and the ratios to the best static arm of the same round, and the load average
at every step. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from embedstream.engine.backend import BatchCall, EmbeddingBackend
from embedstream.settings import Settings, load_settings
from embedstream.tools.bench.baselines import without_fill_rule
from embedstream.tools.bench.context import (
    BenchContext,
    ClientFactory,
    LoadTarget,
    ScenarioResult,
    batching_client,
)
from embedstream.tools.bench.figures import PROVIDER_MAX_INPUTS, PROVIDER_MAX_TOKENS, LatencyModel
from embedstream.tools.bench.processes import SimulatorProcess
from embedstream.tools.bench.scenarios import closed_loop, open_loop
from embedstream.tools.progress import make_step_progress

from bench.bench_batching import StaticBatcher
from bench.bench_kafka_cpu import Sampler, profile_table

TOKENS = 30
CALLERS = 50
RATES = (1000.0, 3000.0)


def static(max_items: int, interval_ms: float) -> ClientFactory:
    """bench_batching.py's static batcher, its calls in the run's model and format."""

    def make(backend: EmbeddingBackend, settings: Settings) -> LoadTarget:
        def make_call(texts: Sequence[str]) -> BatchCall:
            return BatchCall(settings.model, texts, settings.encoding_format, None)

        return StaticBatcher(
            backend,
            max_items=max_items,
            interval_s=interval_ms / 1e3,
            max_concurrency=settings.max_concurrency,
            make_call=make_call,
        )

    return make


@dataclass(frozen=True)
class Arm:
    name: str
    make_client: ClientFactory
    sdk: bool = False
    rules: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext

    @property
    def is_static(self) -> bool:
        return self.name.startswith("static")


ARMS = {
    "embedstream": Arm("embedstream", batching_client),
    # The engine as it was before the fill rule: a call takes what is buffered when a slot
    # frees (core/policy.fill_target off while the arm runs).
    "embedstream-nofill": Arm("embedstream-nofill", batching_client, rules=without_fill_rule),
    "embedstream-sdk": Arm("embedstream-sdk", batching_client, sdk=True),
    "static-200-5ms": Arm("static-200-5ms", static(200, 5.0)),
    "static-64-50ms": Arm("static-64-50ms", static(64, 50.0)),
}


def engine_settings(model: LatencyModel, base_url: str, overrides: dict[str, object]) -> Settings:
    """`embedstream bench`'s engine settings (app.engine_settings without flags)."""
    return load_settings(
        env={},
        overrides={
            "max_batch_size": PROVIDER_MAX_INPUTS,
            "max_batch_tokens": PROVIDER_MAX_TOKENS,
            "max_concurrency": model.capacity,
            "log_level": "WARNING",
            "base_url": base_url,
            **overrides,
        },
    )


SCENARIOS = ("closed", *(f"open-{rate:.0f}" for rate in RATES))


def scenarios(
    seconds: float, names: Sequence[str]
) -> list[tuple[str, Callable[[BenchContext], object]]]:
    chosen: list[tuple[str, Callable[[BenchContext], object]]] = []
    if "closed" in names:
        chosen.append((f"closed {CALLERS}", lambda c: closed_loop(c, CALLERS, seconds=seconds)))
    for rate in RATES:
        if f"open-{rate:.0f}" in names:
            chosen.append(
                (f"open {rate:,.0f}/s", functools.partial(_open, rate=rate, seconds=seconds))
            )
    return chosen


async def _open(ctx: BenchContext, *, rate: float, seconds: float) -> ScenarioResult:
    return await open_loop(ctx, rate, seconds)


def figures(result: ScenarioResult) -> dict[str, float | int | None]:
    row = result.row
    latency = row.latency
    return {
        "items": row.items,
        "items_per_s": row.items_per_s,
        "p50_ms": latency.p50_ms if latency else None,
        "p99_ms": latency.p99_ms if latency else None,
        "calls": row.calls,
        "mean_batch": row.mean_batch,
        "client_cpu_s": row.client_cpu_s,
        "failed": row.failed,
    }


async def run(args: argparse.Namespace) -> list[dict[str, object]]:
    model = LatencyModel()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-tails-"))
    simulator = SimulatorProcess(model, dimensions=256, burst_s=1.0, log_dir=log_dir)
    await simulator.start()
    progress = make_step_progress(sys.stderr, prefix="tails")
    overrides = dict(pair.split("=", 1) for pair in args.set)
    settings = engine_settings(model, simulator.base_url, overrides)
    arms = [ARMS[name] for name in args.arms.split(",")]
    records: list[dict[str, object]] = []
    try:
        for round_ in range(1, args.rounds + 1):
            turned = arms[round_ - 1 :] + arms[: round_ - 1] if len(arms) > 1 else arms
            for label, scenario in scenarios(args.seconds, args.scenarios.split(",")):
                for arm in turned:
                    ctx = BenchContext(settings, model, TOKENS, args.seed, progress, log_dir,
                                       provider=simulator, sdk=arm.sdk,
                                       make_client=arm.make_client)  # fmt: skip
                    load = os.getloadavg()[0]
                    with arm.rules():
                        result = await scenario(ctx)  # type: ignore[misc]
                    assert isinstance(result, ScenarioResult)
                    records.append({"round": round_, "scenario": label, "arm": arm.name,
                                    "load": load, **figures(result)})  # fmt: skip
    finally:
        progress.close()
        simulator.stop()
    return records


def report(records: Sequence[dict[str, object]], arms: Sequence[str]) -> str:
    lines: list[str] = []
    labels = list(dict.fromkeys(str(r["scenario"]) for r in records))
    for label in labels:
        rows = [r for r in records if r["scenario"] == label]
        lines += [f"### {label}", "",
                  "| round | arm | load | items/s | P50 ms | P99 ms | calls | mean batch "
                  "| CPU s | P99 / best static | items/s / best static |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        ratios: dict[str, list[tuple[float, float]]] = {}
        for round_ in sorted({int(str(r["round"])) for r in rows}):
            in_round = [r for r in rows if r["round"] == round_]
            statics = [r for r in in_round if str(r["arm"]).startswith("static")]
            best = min(statics, key=lambda r: float(str(r["p99_ms"]))) if statics else None
            for r in sorted(in_round, key=lambda r: arms.index(str(r["arm"]))):
                p99, per_s = float(str(r["p99_ms"])), float(str(r["items_per_s"]))
                vs = "-"
                if best is not None and not str(r["arm"]).startswith("static"):
                    p99_ratio = p99 / float(str(best["p99_ms"]))
                    rate_ratio = per_s / float(str(best["items_per_s"]))
                    ratios.setdefault(str(r["arm"]), []).append((p99_ratio, rate_ratio))
                    vs = f"{p99_ratio:.2f}x | {rate_ratio:.2f}x"
                else:
                    vs = "- | -"
                lines.append(
                    f"| {round_} | {r['arm']} | {float(str(r['load'])):.1f} | {per_s:,.0f} "
                    f"| {float(str(r['p50_ms'])):,.1f} | {p99:,.1f} | {r['calls']:,} "
                    f"| {float(str(r['mean_batch'] or 0)):.1f} "
                    f"| {float(str(r['client_cpu_s'])):.1f} | {vs} |"
                )
        lines.append("")
        for arm, pairs in ratios.items():
            p99s = ", ".join(f"{p:.2f}x" for p, _ in pairs)
            rates = ", ".join(f"{q:.2f}x" for _, q in pairs)
            median = statistics.median(p for p, _ in pairs)
            lines.append(f"{arm} vs the best static arm of each round: P99 {p99s} "
                         f"(median {median:.2f}x); items/s {rates}")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"of {', '.join(ARMS)}")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an engine setting for every arm (e.g. max_wait_ms=20)")  # fmt: skip
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="of " + ", ".join(SCENARIOS)
    )
    parser.add_argument("--json", type=Path, help="every figure")
    parser.add_argument("--profile", type=Path, help="py-spy's raw samples of the whole run")
    args = parser.parse_args()
    unknown = [name for name in args.arms.split(",") if name not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)} (known: {', '.join(ARMS)})")
    sampler = Sampler(args.profile)
    sampler.start()
    records = asyncio.run(run(args))
    sampler.stop()
    print(report(records, args.arms.split(",")))
    if args.profile is not None:
        items = sum(int(str(r["items"])) for r in records)
        cpu_s = sum(float(str(r["client_cpu_s"])) for r in records)
        print(profile_table(args.profile, items, cpu_s / items, 25))
    if args.json:
        args.json.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
