"""Soak: a long steady run with provider faults and rebalances; is anything growing or lost?

    python bench/soak.py --bootstrap 127.0.0.1:39092 [--minutes 30] [--rate 500]
        [--error-rate 0.02] [--rebalance-every-min 5] [--out soak.json]

A script, not a test (it asserts nothing; docs/operations/reliability.md records its figures).
It runs real `embedstream run` processes against the broker given and the simulator (in this
process, answering 500 to `--error-rate` of the calls), while a feeder publishes `--rate`
requests/s (every fifth high priority). One member runs throughout; every
`--rebalance-every-min` a second member joins or leaves (SIGTERM), so the group rebalances that
often. Every 10 s it samples each member's resident memory and open file descriptors and the
group's committed lag. At the end it waits for the lag to drain and reads every topic with
`embedstream verify`.

Reported: the resident memory slope of the member that ran throughout (MiB per hour, a
least-squares fit over the samples after the first `--warmup-min` minutes: start-up, JIT-free
Python warming its caches and the first buffers filling are not a leak), its peak and last
RSS and open descriptors, lag percentiles, lost ids, duplicates and dead letters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import create_topics, load_topic_specs
from embedstream.tools.verify.report import VerificationReport

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the chaos harness of the tests: processes, feeder, drain

from tests.e2e.chaos import Fleet, ProcessorOptions, ProcessorProcess  # noqa: E402
from tests.e2e.chaos_feed import Feeder, input_topics, run_until_drained  # noqa: E402
from tests.integration.helpers import committed_lag  # noqa: E402

SAMPLE_EVERY_S = 10.0
MIB = 2**20


@dataclass
class Sample:
    at_s: float  # since the feeder started
    rss_mib: dict[str, float]
    open_fds: dict[str, int]
    lag: int | None  # committed lag summed over the input topics (None: the check failed)


@dataclass
class Figures:
    minutes: float
    rate_per_s: float
    error_rate: float
    events: int
    rebalances: int
    exit_codes: list[int]
    rss_slope_mib_per_hour: float
    rss_first_mib: float
    rss_peak_mib: float
    rss_last_mib: float
    fds_first: int
    fds_peak: int
    fds_last: int
    lag_p50: float
    lag_p99: float
    lag_max: int
    lost: int
    duplicate_ids: int
    duplicate_results: int
    dead_letters: int
    misattributed: int
    results: int
    drain_s: float
    samples: list[Sample] = field(default_factory=list)


def open_fds(proc: ProcessorProcess) -> int | None:
    if not proc.alive or proc.pid is None:
        return None
    try:
        return len(os.listdir(f"/proc/{proc.pid}/fd"))
    except OSError:
        return None


def least_squares_slope(points: list[tuple[float, float]]) -> float:
    """Slope of the least-squares line through (x, y) points (0 with fewer than two)."""
    if len(points) < 2:
        return 0.0
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


async def sample_forever(
    fleet: Fleet, bootstrap: str, group: str, prefix: str, started: float, into: list[Sample]
) -> None:
    topics = input_topics(prefix)
    while True:
        lag: int | None = None
        try:
            by_topic = await asyncio.wait_for(committed_lag(bootstrap, group, topics), 10)
            lag = sum(by_topic.values())
        except Exception:  # a sample is best effort; the gap shows as None
            lag = None
        rss = {p.name: round((p.rss_bytes() or 0) / MIB, 1) for p in fleet.alive}
        fds = {p.name: n for p in fleet.alive if (n := open_fds(p)) is not None}
        into.append(Sample(round(time.monotonic() - started, 1), rss, fds, lag))
        print(f"[soak] t={into[-1].at_s:.0f}s rss={rss} fds={fds} lag={lag}", flush=True)
        await asyncio.sleep(SAMPLE_EVERY_S)


async def soak(args: argparse.Namespace, log_dir: Path) -> Figures:
    prefix = f"soak.{uuid.uuid4().hex[:8]}."
    print(f"[soak] prefix {prefix}, processor logs in {log_dir}", flush=True)
    await create_topics(args.bootstrap, load_topic_specs(prefix))
    events = int(args.minutes * 60 * args.rate)
    simulator = SimulatorServer(SimulatorConfig(error_rate=args.error_rate))
    await simulator.start(port=args.simulator_port)
    try:
        options = ProcessorOptions(
            args.bootstrap, prefix, prefix + "group", simulator.url,
            max_buffered_bytes=64 * 2**20, max_event_bytes=2**20,  # the defaults: 5000 items
            max_batch_size=256, max_concurrency=4,
            session_timeout_ms=10_000, heartbeat_interval_ms=3000, commit_interval_ms=500,
        )  # fmt: skip
        async with Fleet(options, log_dir) as fleet:
            anchor = fleet.add("anchor")
            second = fleet.add("second")
            await anchor.start()
            await anchor.wait_assigned(nonempty=True)
            samples: list[Sample] = []
            feeder = Feeder(args.bootstrap, prefix, count=events, rate_per_s=args.rate,
                            id_prefix="s")  # fmt: skip
            started = time.monotonic()
            sampler = asyncio.create_task(
                sample_forever(fleet, args.bootstrap, options.group, prefix, started, samples)
            )
            rebalances = 0
            codes: list[int] = []
            async with feeder:
                period_s = args.rebalance_every_min * 60
                next_change = started + period_s
                while not feeder.done.is_set():
                    if time.monotonic() >= next_change:
                        if second.alive:
                            codes.append(await second.sigterm(timeout_s=120))
                        else:
                            await second.start()
                            await second.wait_assigned(timeout_s=120)
                        rebalances += 1
                        next_change += period_s
                        print(f"[soak] rebalance {rebalances}: second member "
                              f"{'joined' if second.alive else 'left'}", flush=True)  # fmt: skip
                    await asyncio.sleep(1.0)
                drained = await run_until_drained(
                    args.bootstrap, prefix, options.group, feeder, timeout_s=args.drain_timeout_s,
                    check_vectors=False, describe=fleet.log_tails,
                )  # fmt: skip
            sampler.cancel()
            for proc in fleet.alive:
                codes.append(await proc.sigterm(timeout_s=120))
    finally:
        await simulator.stop()
    report = drained.report
    return summarise(args, samples, rebalances, codes, events, drained.drain_s, report)


def summarise(
    args: argparse.Namespace,
    samples: list[Sample],
    rebalances: int,
    codes: list[int],
    events: int,
    drain_s: float,
    report: VerificationReport,
) -> Figures:
    anchor = [(s.at_s, s.rss_mib["anchor"]) for s in samples if "anchor" in s.rss_mib]
    after_warmup = [(t, r) for t, r in anchor if t >= args.warmup_min * 60] or anchor
    fds = [s.open_fds["anchor"] for s in samples if "anchor" in s.open_fds]
    lags = [s.lag for s in samples if s.lag is not None]
    quantiles = statistics.quantiles(lags, n=100) if len(lags) >= 2 else [0.0] * 99
    r = report
    return Figures(
        minutes=args.minutes,
        rate_per_s=args.rate,
        error_rate=args.error_rate,
        events=events,
        rebalances=rebalances,
        exit_codes=codes,
        rss_slope_mib_per_hour=round(least_squares_slope(after_warmup) * 3600, 2),
        rss_first_mib=after_warmup[0][1] if after_warmup else 0.0,
        rss_peak_mib=max((v for _, v in anchor), default=0.0),
        rss_last_mib=anchor[-1][1] if anchor else 0.0,
        fds_first=fds[0] if fds else 0,
        fds_peak=max(fds, default=0),
        fds_last=fds[-1] if fds else 0,
        lag_p50=quantiles[49],
        lag_p99=quantiles[98],
        lag_max=max(lags, default=0),
        lost=len(r.lost),
        duplicate_ids=len(r.duplicates),
        duplicate_results=r.duplicate_results,
        dead_letters=r.dead_letters,
        misattributed=len(r.misattributed),
        results=r.results,
        drain_s=drain_s,
        samples=samples,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to feed")
    parser.add_argument("--rate", type=float, default=500.0, help="requests per second")
    parser.add_argument("--error-rate", type=float, default=0.02, help="share of calls 500")
    parser.add_argument("--rebalance-every-min", type=float, default=5.0)
    parser.add_argument("--warmup-min", type=float, default=2.0, help="left out of the slope")
    parser.add_argument("--drain-timeout-s", type=float, default=600.0)
    parser.add_argument("--simulator-port", type=int, default=0, help="0: any free port")
    parser.add_argument("--log-dir", default=None, help="processor logs (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the figures and samples as JSON")
    args = parser.parse_args()
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="embedstream-soak-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    figures = asyncio.run(soak(args, log_dir))
    summary = {k: v for k, v in asdict(figures).items() if k != "samples"}
    print("[soak] " + json.dumps(summary), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(asdict(figures), indent=1))


if __name__ == "__main__":
    main()
