"""The options of `embedstream bench`, and the engine settings it runs with.

Kept apart from the scenarios so that building the command line imports nothing heavy.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from embedstream.settings.flags import add_settings_flags
from embedstream.tools.bench.extras import EXTRA_SCENARIOS

# The scenarios, in the order they run.
SCENARIOS = (
    "closed", "backlog", "open", "kafka-backlog", "kafka-poisson", "kafka-flood", "kafka-floor",
    "documents", "kafka-fairness", "kafka-mixed", "online",
)  # fmt: skip
# documents, kafka-fairness, kafka-mixed and online run on the Kafka scenarios' broker but are no
# members of the kafka group (each one's passes through a processor take longer than the
# group's other scenarios together).
ALIASES = {"all": SCENARIOS, "in-process": SCENARIOS[:3], "kafka": SCENARIOS[3:7], "none": ()}
KAFKA_SCENARIOS = frozenset(SCENARIOS[3:])  # those that need a broker

# Engine settings a run may set (flags or --config); the rest keep the library's defaults.
BENCH_SETTINGS = (
    "model",
    "encoding_format",
    "max_batch_size",
    "max_batch_tokens",
    "max_wait_ms",
    "scale_factor",
    "min_low_share",
    "online_target_ms",
    "cache",
    "max_concurrency",
    "target_latency_ms",
    "rate_limit_rpm",
    "rate_limit_tpm",
    "max_buffered_bytes",
    "compression_type",
    "fetch_max_wait_ms",
    "request_timeout_s",
    "log_level",
)


@dataclass(frozen=True)
class Sizes:
    """How much each scenario does: the issue's sizes, or small ones with --quick."""

    callers: int
    seconds: float
    backlog_items: int
    rates: tuple[float, ...]
    kafka_items: int
    kafka_rate: float
    kafka_seconds: float
    scale_out_items: int
    flood_items: int  # the low backlog of kafka-flood
    flood_high_rate: float  # high events/s during its drain
    floor_items: int  # the records of kafka-floor
    docs: int  # the documents of each documents pass (DOC_PARAGRAPHS paragraphs each)
    fairness_items: int  # kafka-fairness: source A's backlog
    fairness_rate: float  # kafka-fairness: source B's events/s
    fairness_seconds: float  # kafka-fairness: how long B publishes alone
    mixed_items: int  # kafka-mixed: the backlog of both lanes (a tenth high)
    online_items: int  # online: the low backlog drained beside the online callers
    online_rate: float  # online: the callers' requests/s (Poisson)


FULL = Sizes(50, 10.0, 100_000, (1000.0, 3000.0), 100_000, 2000.0, 10.0, 100_000,
             20_000, 50.0, 20_000, 1_000, 50_000, 20.0, 10.0, 100_000, 100_000, 20.0)  # fmt: skip
QUICK = Sizes(50, 2.0, 5_000, (1000.0, 3000.0), 5_000, 2000.0, 3.0, 20_000,
              2_000, 50.0, 2_000, 50, 2_000, 20.0, 3.0, 5_000, 5_000, 20.0)  # fmt: skip
DOC_PARAGRAPHS = 20  # about one chunk each at the default chunking rules

HTTP_PATHS = {"lean": (False,), "sdk": (True,), "both": (True, False)}  # sdk? per run of each


@dataclass(frozen=True)
class PoissonArm:
    """A variant of kafka-poisson run beside the default one: settings and the results
    producer's linger (``linger_ms``), from ``--poisson-ab fetch_max_wait_ms=5,linger_ms=0``."""

    text: str
    settings: tuple[tuple[str, int], ...]
    result_linger_ms: int | None


def _poisson_arm(text: str) -> PoissonArm:
    settings: list[tuple[str, int]] = []
    linger: int | None = None
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"expected NAME=INTEGER, got {part!r}")
        if name == "linger_ms":
            linger = int(value)
        elif name in ("fetch_max_wait_ms", "max_wait_ms", "max_poll_records"):
            settings.append((name, int(value)))
        else:
            raise argparse.ArgumentTypeError(
                f"unknown variant setting {name!r}; known: linger_ms, fetch_max_wait_ms, "
                "max_wait_ms, max_poll_records"
            )
    if not settings and linger is None:
        raise argparse.ArgumentTypeError("a variant changes at least one setting")
    return PoissonArm(text, tuple(settings), linger)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _scenarios(text: str) -> tuple[str, ...]:
    chosen: list[str] = []
    for name in filter(None, (part.strip() for part in text.split(","))):
        if name in ALIASES:
            chosen += ALIASES[name]
        elif name in SCENARIOS:
            chosen.append(name)
        else:
            known = ", ".join((*SCENARIOS, *ALIASES))
            raise argparse.ArgumentTypeError(f"unknown scenario {name!r}; known: {known}")
    return tuple(s for s in SCENARIOS if s in chosen)


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `embedstream bench`; pair with :func:`embedstream.tools.bench.app.run_bench`."""
    add = parser.add_argument
    add(
        "--scenarios",
        type=_scenarios,
        default=SCENARIOS,
        metavar="LIST",
        help="comma-separated: closed, backlog, open, kafka-backlog, kafka-poisson, "
        "kafka-flood, kafka-floor, documents, kafka-fairness, kafka-mixed, or the "
        "groups in-process, kafka, all, none (e.g. with --endpoint) (default: all)",
    )
    add("--quick", action="store_true", help="small sizes: a check that everything runs")
    model = parser.add_argument_group("simulated provider (the latency model)")
    model.add_argument("--base-ms", type=_non_negative_float, default=40.0, help="ms per call")
    model.add_argument(
        "--per-token-ms", type=_non_negative_float, default=0.02, help="extra ms per token"
    )
    model.add_argument(
        "--per-input-ms", type=_non_negative_float, default=0.0, help="extra ms per input"
    )
    model.add_argument("--capacity", type=_positive_int, default=8, help="calls served at once")
    model.add_argument(
        "--rpm", type=_non_negative_float, default=0.0, help="announced requests/min; 0 = none"
    )
    model.add_argument(
        "--tpm", type=_non_negative_float, default=0.0, help="announced tokens/min; 0 = none"
    )
    model.add_argument(
        "--burst-s",
        type=_positive_float,
        default=1.0,
        help="seconds of refill the rpm/tpm budgets hold (short, so a short run meets them)",
    )
    model.add_argument("--dimensions", type=_positive_int, default=256, help="vector length")
    model.add_argument(
        "--tokens", type=_positive_int, default=30, help="tokens per text (about 4 chars each)"
    )
    sizes = parser.add_argument_group("sizes (defaults: the issue's; --quick: smaller)")
    sizes.add_argument("--callers", type=_positive_int, default=None, help="closed loop (50)")
    sizes.add_argument(
        "--seconds", type=_positive_float, default=None, help="closed and open loop (10; 2)"
    )
    sizes.add_argument(
        "--backlog-items", type=_positive_int, default=None, help="backlog (100,000; 5,000)"
    )
    sizes.add_argument(
        "--rates",
        type=_positive_float,
        nargs="+",
        default=None,
        metavar="R",
        help="open loop arrival rates per second (1000 3000)",
    )
    sizes.add_argument(
        "--kafka-items", type=_positive_int, default=None, help="Kafka backlog (100,000; 5,000)"
    )
    sizes.add_argument(
        "--kafka-rate", type=_positive_float, default=None, help="Kafka Poisson rate/s (2000)"
    )
    sizes.add_argument(
        "--kafka-seconds", type=_positive_float, default=None, help="Kafka Poisson (10; 3)"
    )
    kafka = parser.add_argument_group("Kafka")
    kafka.add_argument(
        "--bootstrap",
        default=None,
        metavar="HOST:PORT",
        help="an Apache Kafka broker (PLAINTEXT) for the Kafka scenarios and --scale-out "
        "(default: the embedded broker of the 'embedded' extra)",
    )
    kafka.add_argument(
        "--flood-items", type=_positive_int, default=None, help="kafka-flood low backlog (20,000)"
    )
    kafka.add_argument(
        "--flood-high-rate",
        type=_positive_float,
        default=None,
        help="kafka-flood high events/s during the drain (50)",
    )
    kafka.add_argument(
        "--online-items",
        type=_positive_int,
        default=None,
        help="online: the low backlog drained beside the online callers (100,000)",
    )
    kafka.add_argument(
        "--online-rate",
        type=_positive_float,
        default=None,
        help="online: the callers' requests/s, Poisson, one in ten an array of 16 (20)",
    )
    kafka.add_argument(
        "--fairness-items",
        type=_positive_int,
        default=None,
        help="kafka-fairness: source A's backlog (50,000)",
    )
    kafka.add_argument(
        "--fairness-rate",
        type=_positive_float,
        default=None,
        help="kafka-fairness: source B's events/s (20)",
    )
    kafka.add_argument(
        "--fairness-seconds",
        type=_positive_float,
        default=None,
        help="kafka-fairness: how long B publishes alone (10)",
    )
    kafka.add_argument(
        "--mixed-items",
        type=_positive_int,
        default=None,
        help="kafka-mixed: the backlog of both lanes, a tenth of it high (100,000)",
    )
    kafka.add_argument(
        "--floor-items", type=_positive_int, default=None, help="kafka-floor records (20,000)"
    )
    kafka.add_argument(
        "--docs",
        type=_positive_int,
        default=None,
        help=f"documents: documents per pass, {DOC_PARAGRAPHS} paragraphs each (1,000; 50)",
    )
    kafka.add_argument(
        "--timeline",
        action="store_true",
        help="kafka-poisson, kafka-flood, kafka-mixed: note each request's moments (published, "
        "fetched, call, written, acked, read) and report the P50/P95/P99 of every stage; "
        "online: the same for the lane's requests (received, call, returned, answered)",
    )
    kafka.add_argument(
        "--poisson-ab",
        type=_poisson_arm,
        action="append",
        default=[],
        metavar="NAME=N[,NAME=N]",
        help="also run kafka-poisson with these changed (linger_ms of the results producer, "
        "fetch_max_wait_ms, max_wait_ms, max_poll_records); repeatable",
    )
    kafka.add_argument(
        "--scale-out",
        action="store_true",
        help="also drain a backlog with 1, 2 and 3 `embedstream run` processes in one group",
    )
    kafka.add_argument(
        "--processors",
        type=_positive_int,
        nargs="+",
        default=[1, 2, 3],
        metavar="N",
        help="group sizes of --scale-out",
    )
    kafka.add_argument(
        "--scale-out-items", type=_positive_int, default=None, help="(100,000; 20,000)"
    )
    real = parser.add_argument_group("a real endpoint (optional)")
    real.add_argument(
        "--endpoint",
        default=None,
        metavar="URL",
        help="also measure this OpenAI-compatible base URL (ending in /v1)",
    )
    real.add_argument(
        "--api-key",
        default=None,
        help="its key (default: $OPENAI_API_KEY; visible to other local users as a flag)",
    )
    real.add_argument(
        "--budget",
        type=_positive_int,
        default=200,
        metavar="N",
        help="most texts sent to the endpoint, warm-up included",
    )
    out = parser.add_argument_group("results")
    out.add_argument(
        "--target-p99-ms",
        type=_positive_float,
        default=100.0,
        help="your latency target, for the recommended settings",
    )
    out.add_argument("--json", type=Path, default=None, metavar="FILE", help="every figure")
    out.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="PNG plots (needs the 'bench' extra: matplotlib)",
    )
    out.add_argument("--seed", type=int, default=1, help="seed of texts and arrivals")
    out.add_argument(
        "--http-path",
        choices=sorted(HTTP_PATHS),
        default="lean",
        help="the embedder's HTTP path: lean (the default one), sdk (the openai SDK's, as "
        "before issue 20) or both (each scenario run with the SDK's, then the lean one)",
    )
    for extra in EXTRA_SCENARIOS:
        extra.add_arguments(parser)
    add_settings_flags(parser, BENCH_SETTINGS)


def sizes_from_args(ns: argparse.Namespace) -> Sizes:
    base = QUICK if ns.quick else FULL
    return Sizes(
        callers=ns.callers or base.callers,
        seconds=ns.seconds or base.seconds,
        backlog_items=ns.backlog_items or base.backlog_items,
        rates=tuple(ns.rates or base.rates),
        kafka_items=ns.kafka_items or base.kafka_items,
        kafka_rate=ns.kafka_rate or base.kafka_rate,
        kafka_seconds=ns.kafka_seconds or base.kafka_seconds,
        scale_out_items=ns.scale_out_items or base.scale_out_items,
        flood_items=ns.flood_items or base.flood_items,
        flood_high_rate=ns.flood_high_rate or base.flood_high_rate,
        floor_items=ns.floor_items or base.floor_items,
        docs=ns.docs or base.docs,
        fairness_items=ns.fairness_items or base.fairness_items,
        fairness_rate=ns.fairness_rate or base.fairness_rate,
        fairness_seconds=ns.fairness_seconds or base.fairness_seconds,
        mixed_items=ns.mixed_items or base.mixed_items,
        online_items=ns.online_items or base.online_items,
        online_rate=ns.online_rate or base.online_rate,
    )
