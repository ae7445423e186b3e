"""The `embedstream` command line: `main`, and what each command does."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from embedstream.cli.parser import (
    ALL_SETTINGS,
    CLIENT_SETTINGS,
    MIGRATE_SETTINGS,
    REGISTRY_CLIENT_SETTINGS,
    build_parser,
)
from embedstream.errors import ENV_PREFIX, ConfigError, EmbedStreamError
from embedstream.ops.logs import discard_summaries, setup_logging
from embedstream.settings import Settings
from embedstream.settings.commands import SERVE_SETTINGS
from embedstream.settings.flags import given_flags, settings_from_args


def _settings(ns: argparse.Namespace, names: Sequence[str]) -> Settings:
    return settings_from_args(ns, names)


def _client_settings(ns: argparse.Namespace) -> Settings:
    """Settings of a one-shot command that talks to Kafka, with its logging set up."""
    settings = _settings(ns, CLIENT_SETTINGS)
    setup_logging(settings.log_level, settings.log_format, settings.secret_values())
    return settings


async def _check_kafka(settings: Settings, topics: Mapping[str, str] | None = None) -> None:
    """Fail in one line, naming the setting, if the cluster refuses these settings or lacks
    one of ``topics`` (name -> the setting naming it); called after every local check (files,
    arguments), so those fail without waiting for a broker."""
    from embedstream.kafka.client.admin import require_topics
    from embedstream.kafka.client.clients import check_broker, connection_for

    await check_broker(settings)
    if topics:
        await require_topics(connection_for(settings), topics, wait_s=0)


def _debug(ns: argparse.Namespace) -> bool:
    """Whether the user asked for DEBUG (flag or environment), even if settings fail to load."""
    level = getattr(ns, "log_level", None) or os.environ.get(ENV_PREFIX + "LOG_LEVEL") or ""
    return level.upper() == "DEBUG"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "sink" and (ns.action == "search") != (ns.question is not None):
        parser.error("sink search needs a QUESTION; sink and sink init take none")
    if ns.command == "produce" and ns.ids_out is not None and not ns.plain:
        parser.error("--ids-out needs --plain: only plain lines get generated ids")
    if ns.command == "produce" and (problem := _produce_conflict(ns)):
        parser.error(problem)
    if ns.command == "migrate" and (problem := _migrate_conflict(ns)):
        parser.error(problem)
    try:
        return asyncio.run(_dispatch(ns))
    except EmbedStreamError as exc:
        # A mistake or an environment problem, not a bug: one line, what failed and what to do.
        discard_summaries()  # lines held back about the same failure would only repeat it
        if _debug(ns):
            traceback.print_exc()
        print(f"embedstream: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _dispatch(ns: argparse.Namespace) -> int:
    command: str = ns.command
    if command == "run":
        settings = _settings(ns, ALL_SETTINGS)
        setup_logging(settings.log_level, settings.log_format, settings.secret_values())
        from embedstream.app.host import run_host, supervises

        if supervises(settings):  # each lane a process of its own
            return await run_host(settings, given_flags(ns, ALL_SETTINGS), ns.config)
        from embedstream.app.processor import run_service

        await run_service(settings)
        return 0
    if command == "serve":
        settings = _settings(ns, SERVE_SETTINGS)
        setup_logging(settings.log_level, settings.log_format, settings.secret_values())
        from embedstream.app.gateway import run_gateway

        await run_gateway(settings)
        return 0
    if command == "sink":
        return await _sink(ns)
    if command == "migrate":
        return await _migrate(ns)
    if command == "simulate":
        logging.basicConfig(level=logging.INFO)
        from embedsim.local_model import LocalModelUnavailable
        from embedsim.server import config_from_args, serve_forever

        try:
            await serve_forever(config_from_args(ns), ns.host, ns.port)
        except LocalModelUnavailable as exc:
            raise EmbedStreamError(str(exc)) from None
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
    if command == "bench":
        from embedstream.tools.bench.app import run_bench_from_args

        return await run_bench_from_args(ns)
    if command == "demo":
        from embedstream.tools.demo.app import run_demo_from_args

        return await run_demo_from_args(ns)
    raise AssertionError(command)


async def _sink(ns: argparse.Namespace) -> int:
    settings = _settings(ns, ALL_SETTINGS)
    setup_logging(settings.log_level, settings.log_format, settings.secret_values())
    from embedstream.app import store_writer

    if ns.action == "init":
        print(await store_writer.init_store(settings))
    elif ns.action == "search":
        online = _online_lane(ns)
        for hit in await store_writer.search_store(settings, ns.question, ns.k, online):
            text = (hit.text or "").replace("\n", " ")
            print(f"{hit.distance:.4f}  {hit.doc_id}#{hit.chunk_seq}  {text[:200]}")
    else:
        await store_writer.run_store_writer(settings)
    return 0


def _online_lane(ns: argparse.Namespace) -> Any:
    """`sink search`'s --online-url and the key of --online-key-file, or None."""
    from embedstream.app.store_writer import OnlineLaneAddress

    if ns.online_url is None:
        if ns.online_key_file is not None:
            raise ConfigError("--online-key-file", "is given without --online-url")
        return None
    key = None
    if ns.online_key_file is not None:
        try:
            key = ns.online_key_file.read_text().strip()
        except OSError as exc:
            raise ConfigError("--online-key-file", f"cannot be read: {exc.strerror}") from None
    return OnlineLaneAddress(ns.online_url, key)


def _migrate_conflict(ns: argparse.Namespace) -> str | None:
    if ns.action not in ("plan", "start") and (ns.model or ns.dimensions):
        return f"migrate {ns.action} takes no --model or --dimensions (plan and start do)"
    if ns.allow_missing and ns.action != "cutover":
        return "--allow-missing goes with migrate cutover only"
    if ns.via is not None and ns.action != "start":
        return "--via goes with migrate start only (plan shows both prices)"
    return None


async def _migrate(ns: argparse.Namespace) -> int:
    settings = _settings(ns, MIGRATE_SETTINGS)
    setup_logging(settings.log_level, settings.log_format, settings.secret_values())
    from embedstream.app.migrate import run_migration

    lines = await run_migration(
        settings,
        ns.action,
        model=ns.model,
        dimensions=ns.dimensions,
        allow_missing=ns.allow_missing,
        via=ns.via,
    )
    for line in lines:
        print(line)
    return 0


async def _topics(ns: argparse.Namespace) -> int:
    from embedstream.kafka.client import admin as topics
    from embedstream.kafka.client.clients import connection_for
    from embedstream.kafka.client.user_errors import kafka_user_errors

    settings = _client_settings(ns)
    kafka = connection_for(settings)
    try:
        specs = topics.configured_specs(settings, ns.file)
    except (topics.TopicConfigError, OSError) as exc:
        raise EmbedStreamError(f"topic declarations: {_reason(exc)}") from exc
    await _check_kafka(settings)
    with kafka_user_errors(settings):
        existing = await topics.existing_topics(kafka)
        if ns.action == "create":
            plan = topics.plan_creation(specs, existing, settings.bootstrap_servers)
            created = await topics.create_topics(kafka, plan.create)
            for name in created:
                print(f"created {name}")
            if plan.kept_borrowed:
                print(f"left as they are: the request topics {', '.join(plan.kept_borrowed)}")
            print(f"{len(created)} created, {len(specs) - len(created)} already existed")
        elif ns.action == "list":
            for spec in specs:
                if spec.name in existing:
                    print(spec.name)
        else:
            descriptions = await topics.describe_topics(kafka, specs)
            print(topics.format_description(specs, descriptions))
    return 0


@contextmanager
def _open(path: Path | None, mode: str, default: BinaryIO | None) -> Iterator[Any]:
    """``path`` opened in binary ``mode`` (``default`` when None); a failure is a user error."""
    if path is None:
        yield default
        return
    try:
        fh = path.open(mode)
    except OSError as exc:
        raise EmbedStreamError(f"cannot open {path}: {_reason(exc)}") from exc
    with fh:
        yield fh


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _produce_conflict(ns: argparse.Namespace) -> str | None:
    if ns.delete is not None and (ns.files or ns.documents or ns.plain):
        return "--delete takes doc_ids only: publish documents in a separate command"
    if ns.documents and ns.plain:
        return "--documents and --plain exclude each other"
    if len(ns.files) > 1 and not ns.documents:
        return "several files need --documents (one document per file)"
    return None


async def _produce(ns: argparse.Namespace) -> int:
    from embedstream.kafka.client.topics import topic_settings
    from embedstream.tools.produce import input_size, produce_lines, read_lines
    from embedstream.tools.progress import make_progress

    settings = _settings(ns, (*CLIENT_SETTINGS, *REGISTRY_CLIENT_SETTINGS))
    setup_logging(settings.log_level, settings.log_format, settings.secret_values())
    if ns.documents or ns.delete is not None:
        from embedstream.tools.produce_documents import produce_from_args

        return await produce_from_args(ns, settings, _check_kafka)
    schema = _produce_schema(ns, settings)
    with (
        _open(ns.files[0] if ns.files else None, "rb", sys.stdin.buffer) as source,
        _open(ns.ids_out, "wb", None) as ids_out,
    ):
        # The lane's first topic, where produce writes (a lane may list several).
        role = "requests_high" if ns.priority == "high" else "requests_low"
        await _check_kafka(settings, dict(list(topic_settings(settings, [role]).items())[:1]))
        progress = None if ns.quiet else make_progress(sys.stderr, input_size(source))
        sent = await produce_lines(
            settings,
            read_lines(source),
            priority=ns.priority,
            plain=ns.plain,
            progress=progress,
            ids_out=ids_out,
            record_format=ns.format,
            schema=schema,
        )
    print(f"sent {sent} requests", file=sys.stderr)
    return 0


def _produce_schema(ns: argparse.Namespace, settings: Settings) -> str | None:
    """The text of --schema, checked against --format and the registry setting."""
    if ns.format == "json":
        if ns.schema is not None:
            raise EmbedStreamError("--schema needs --format avro, json_schema or protobuf")
        return None
    if ns.schema is None:
        raise EmbedStreamError(f"--format {ns.format} needs --schema FILE")
    if ns.plain:
        raise EmbedStreamError("--plain sends JSON requests; it does not go with --format")
    if not settings.schema_registry_url:
        raise ConfigError("schema_registry_url", f"produce --format {ns.format} registers "
                          "its schema: set the registry's address")  # fmt: skip
    from embedstream.tools.produce_formats import record_encoder

    with _open(ns.schema, "rb", None) as file:
        assert file is not None
        text: str = file.read().decode("utf-8", "replace")
    record_encoder(ns.format, text)  # a schema that does not parse fails before any connection
    return text


async def _consume(ns: argparse.Namespace) -> int:
    from embedstream.tools.consume import consume_records, write_json_line

    settings = _client_settings(ns)
    await _check_kafka(settings)
    async for doc in consume_records(
        settings,
        dead_letters=ns.dead_letters,
        from_beginning=ns.from_beginning,
        limit=ns.limit,
        idle_timeout_s=ns.idle_timeout,
        documents_only=ns.documents,
    ):
        write_json_line(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
