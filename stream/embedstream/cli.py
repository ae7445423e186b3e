"""The `embedstream` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embedstream.config import FIELDS, Settings
from embedstream.errors import EmbedStreamError
from embedstream.flags import CONNECTION_SETTINGS, add_settings_flags, settings_from_args
from embedstream.ops.logs import setup_logging

ALL_SETTINGS = tuple(FIELDS)
COMMON_SETTINGS = CONNECTION_SETTINGS


def _settings(ns: argparse.Namespace, names: Sequence[str]) -> Settings:
    return settings_from_args(ns, names)


async def _checked_settings(ns: argparse.Namespace, names: Sequence[str]) -> Settings:
    """Settings for a command that talks to Kafka, after the broker accepted them."""
    from embedstream.kafka.clients import check_broker

    settings = _settings(ns, names)
    await check_broker(settings)
    return settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embedstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        usage="embedstream run [--config FILE] [--<setting> VALUE ...]",
        help="run one processor (a consumer-group member)",
        description="Run one processor. Every setting is also EMBEDSTREAM_<NAME> in the "
        "environment or a key of the --config file; flags win.",
    )
    add_settings_flags(run, ALL_SETTINGS)

    from embedstream.tools.simulator.server import add_cli_arguments

    add_cli_arguments(sub.add_parser("simulate", help="serve a simulated /v1/embeddings"))

    topics = sub.add_parser("topics", help="create, list or describe the topics")
    topics.add_argument("action", choices=["create", "list", "describe"])
    topics.add_argument("--file", type=Path, default=None, help="topic declarations (TOML)")
    add_settings_flags(topics, COMMON_SETTINGS)

    produce = sub.add_parser("produce", help="publish requests from JSON lines or plain text")
    produce.add_argument("file", nargs="?", type=Path, help="input file (default: stdin)")
    produce.add_argument("--priority", choices=["high", "low"], default="low")
    produce.add_argument("--plain", action="store_true", help="each line is a text, ids generated")
    produce.add_argument("--quiet", action="store_true", help="no progress bar")
    add_settings_flags(produce, COMMON_SETTINGS)

    consume = sub.add_parser("consume", help="print results (or dead letters) as JSON lines")
    consume.add_argument("--dead-letters", action="store_true")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--limit", type=int, default=None)
    consume.add_argument(
        "--idle-timeout", type=float, default=None, help="stop after S idle seconds"
    )
    add_settings_flags(consume, COMMON_SETTINGS)

    from embedstream.tools.top.app import add_cli_arguments as add_top_arguments
    from embedstream.tools.verify.app import add_cli_arguments as add_verify_arguments

    add_top_arguments(sub.add_parser("top", help="live view of processors' /metrics"))
    add_verify_arguments(
        sub.add_parser("verify", help="check every request got exactly one outcome")
    )

    demo = sub.add_parser("demo", help="embedded broker + simulator + processor, end to end")
    demo.add_argument("--items", type=int, default=3000)
    demo.add_argument("--timeout", type=float, default=300.0, help="give up after S seconds")
    demo.add_argument("--rate", type=float, default=2000.0, help="requests published per second")
    demo.add_argument(
        "--metrics-port", type=int, default=0, help="serve /metrics here (for embedstream top)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return asyncio.run(_dispatch(ns))
    except EmbedStreamError as exc:
        print(f"embedstream: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _dispatch(ns: argparse.Namespace) -> int:
    command: str = ns.command
    if command == "run":
        settings = _settings(ns, ALL_SETTINGS)
        setup_logging(settings.log_level, settings.log_format, settings.secret_values())
        from embedstream.app import run_service

        await run_service(settings)
        return 0
    if command == "simulate":
        logging.basicConfig(level=logging.INFO)
        from embedstream.tools.simulator.server import config_from_args, serve_forever

        await serve_forever(config_from_args(ns), ns.host, ns.port)
        return 0
    if command == "topics":
        return await _topics(ns)
    if command == "produce":
        return await _produce(ns)
    if command == "consume":
        return await _consume(ns)
    if command == "top":
        from embedstream.tools.top.app import run_top_from_args

        return await run_top_from_args(ns)
    if command == "verify":
        from embedstream.tools.verify.app import main_from_args

        return await main_from_args(ns)
    if command == "demo":
        from embedstream.tools.demo import run_demo

        return await run_demo(
            items=ns.items, timeout_s=ns.timeout, rate=ns.rate, metrics_port=ns.metrics_port
        )
    raise AssertionError(command)


async def _topics(ns: argparse.Namespace) -> int:
    from embedstream.kafka import admin as topics
    from embedstream.kafka.clients import connection_for

    settings = await _checked_settings(ns, COMMON_SETTINGS)
    kafka = connection_for(settings)
    specs = topics.load_topic_specs(settings.topic_prefix, ns.file)
    if ns.action == "create":
        created = await topics.create_topics(kafka, specs)
        for name in created:
            print(f"created {name}")
        print(f"{len(created)} created, {len(specs) - len(created)} already existed")
    elif ns.action == "list":
        for name in await topics.list_topics(kafka, settings.topic_prefix):
            print(name)
    else:
        descriptions = await topics.describe_topics(kafka, specs)
        print(topics.format_description(specs, descriptions))
    return 0


async def _produce(ns: argparse.Namespace) -> int:
    from embedstream.tools.clients import Progress, produce_lines

    settings = await _checked_settings(ns, COMMON_SETTINGS)
    if ns.file is not None:
        with ns.file.open(encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.readlines()
        total: int | None = len(lines)
        source: Any = lines
    else:
        source, total = sys.stdin, None
    progress = None if ns.quiet else Progress(sys.stderr, total)
    sent = await produce_lines(
        settings, source, priority=ns.priority, plain=ns.plain, progress=progress
    )
    print(f"sent {sent} requests", file=sys.stderr)
    return 0


async def _consume(ns: argparse.Namespace) -> int:
    from embedstream.tools.clients import consume_records, write_json_line

    settings = await _checked_settings(ns, COMMON_SETTINGS)
    async for doc in consume_records(
        settings,
        dead_letters=ns.dead_letters,
        from_beginning=ns.from_beginning,
        limit=ns.limit,
        idle_timeout_s=ns.idle_timeout,
    ):
        write_json_line(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
