"""The options of ``embedstream demo``, apart from the demo itself so that building the
command line imports nothing heavy."""

from __future__ import annotations

import argparse
import math

DEFAULT_BACKLOG_ITEMS = 9000
DEFAULT_HIGH_RATE = 50.0
DEFAULT_SPARSE_ITEMS = 200
DEFAULT_SPARSE_RATE = 40.0
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_DOCUMENTS = 36


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``embedstream demo``; pair with ``app.run_demo_from_args``."""
    add = parser.add_argument
    add(
        "--items",
        type=_positive_int,
        default=DEFAULT_BACKLOG_ITEMS,
        metavar="N",
        help="low requests of the lanes phase's backlog, published at once",
    )
    add(
        "--high-rate",
        type=_positive_float,
        default=DEFAULT_HIGH_RATE,
        metavar="R",
        help="high requests per second in the lanes phase, sent while the backlog drains",
    )
    add(
        "--sparse-items",
        type=_non_negative_int,
        default=DEFAULT_SPARSE_ITEMS,
        metavar="N",
        help="requests of the sparse first phase, published one by one (0 skips it)",
    )
    add(
        "--sparse-rate",
        type=_positive_float,
        default=DEFAULT_SPARSE_RATE,
        metavar="R",
        help="requests per second in the sparse phase",
    )
    add(
        "--documents",
        type=_non_negative_int,
        default=DEFAULT_DOCUMENTS,
        metavar="N",
        help="documents of the last phase (then some edited, one deleted; 0 skips it)",
    )
    add("--live", action="store_true", help="show the top view of the processor while it runs")
    add(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="give up after S seconds",
    )
    add(
        "--rag",
        action="store_true",
        help="instead: the shipped documents through Kafka, embedstream and the store writer "
        "into PostgreSQL (pgvector) with a real local model (WordLlama), then answer questions "
        "from the table; no API key, nothing downloaded",
    )
    add(
        "--question",
        action="append",
        default=None,
        metavar="TEXT",
        help="--rag: a question to answer from the table (repeatable; default: two examples)",
    )
    add("--k", type=_positive_int, default=3, metavar="N", help="--rag: chunks per answer")
    add(
        "--bootstrap",
        default=None,
        metavar="HOST:PORT",
        help="--rag: use this Kafka cluster (topics of the run's own) instead of the embedded "
        "broker",
    )
    add(
        "--metrics-port",
        type=int,
        default=0,
        help="serve /metrics here, for embedstream top (default: 0, no server; "
        "--live picks a free port)",
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be positive and finite, got {text}")
    return value
