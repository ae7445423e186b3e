"""The `embedstream` command line."""

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

from embedstream.errors import ENV_PREFIX, ConfigError, EmbedStreamError
from embedstream.ops.logs import discard_summaries, setup_logging
from embedstream.settings import FIELDS, Settings
from embedstream.settings.flags import CONNECTION_SETTINGS, add_settings_flags, settings_from_args

ALL_SETTINGS = tuple(FIELDS)
COMMON_SETTINGS = CONNECTION_SETTINGS
# The one-shot client commands also take the log level: DEBUG shows tracebacks and every line.
CLIENT_SETTINGS = (*COMMON_SETTINGS, "log_level")
# produce --format: where the schema is registered, and which fields key the records.
REGISTRY_CLIENT_SETTINGS = ("schema_registry_url", "id_field", "doc_id_field")


def package_version() -> str:
    """The installed distribution's version: pyproject.toml is the one place it is written."""
    from embedstream import __version__

    return __version__


class _HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help unless it has no default worth showing
    (None, False) or already says it. Settings flags default to None: their defaults come
    from the settings, not from argparse."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        said = "%(default)" in text or "(default" in text
        # Identity, not equality: a default of 0 is worth showing, False (a flag's) is not.
        if said or any(action.default is v for v in (None, False, argparse.SUPPRESS)):
            return text
        if not action.option_strings and action.nargs not in ("?", "*"):
            return text
        return text + " (default: %(default)s)"


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
    from embedstream.kafka.admin import require_topics
    from embedstream.kafka.clients import check_broker, connection_for

    await check_broker(settings)
    if topics:
        await require_topics(connection_for(settings), topics, wait_s=0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embedstream", description=__doc__, formatter_class=_HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=_HelpFormatter
        )

    run = sub.add_parser(
        "run",
        usage="embedstream run [--config FILE] [--<setting> VALUE ...]",
        help="run one processor (a consumer-group member)",
        description="Run one processor. Every setting is also EMBEDSTREAM_<NAME> in the "
        "environment or a key of the --config file; flags win.",
        formatter_class=_HelpFormatter,
    )
    add_settings_flags(run, ALL_SETTINGS)

    from embedsim.server import add_cli_arguments

    add_cli_arguments(command("simulate", "serve a simulated OpenAI-compatible /v1/embeddings"))

    topics = command("topics", "create, list or describe the topics")
    topics.add_argument(
        "action",
        choices=["create", "list", "describe"],
        help="create the missing topics (request topics only on a cluster with none yet; "
        "existing topics are never changed), list the existing ones, or describe them",
    )
    topics.add_argument(
        "--file", type=Path, default=None, help="topic declarations (default: the packaged TOML)"
    )
    add_settings_flags(topics, CLIENT_SETTINGS)

    produce = command("produce", "publish requests (or documents) from JSON lines or text")
    produce.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="input file (default: stdin); with --documents, one document per file "
        "(doc_id = the path) or JSON lines of documents (*.jsonl, *.ndjson)",
    )
    produce.add_argument(
        "--documents",
        action="store_true",
        help="publish documents, keyed by doc_id: all versions of a document then go to one "
        "partition, in order, and are processed in that order",
    )
    produce.add_argument(
        "--delete",
        nargs="+",
        default=None,
        metavar="DOC_ID",
        help="publish a tombstone per DOC_ID (keyed like its document, so it follows it)",
    )
    produce.add_argument(
        "--priority",
        choices=["high", "low"],
        default="low",
        help="lane: high for interactive requests, low for bulk work",
    )
    produce.add_argument(
        "--plain", action="store_true", help="each line is a text; ids are generated"
    )
    produce.add_argument(
        "--ids-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --plain: write 'id<TAB>text' per request to FILE, to match results to texts",
    )
    produce.add_argument(
        "--format",
        choices=["json", "avro", "json_schema", "protobuf"],
        default="json",
        help="each JSON line as a record of --schema in the Schema Registry wire format",
    )
    produce.add_argument(
        "--schema", type=Path, default=None, metavar="FILE", help="the schema of --format"
    )
    produce.add_argument("--quiet", action="store_true", help="no progress output")
    add_settings_flags(produce, (*CLIENT_SETTINGS, *REGISTRY_CLIENT_SETTINGS))

    consume = command("consume", "print results (or dead letters) as JSON lines")
    consume.add_argument(
        "--dead-letters",
        action="store_true",
        help="read the dead-letter topic (value, key and error headers) instead of results",
    )
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the oldest record (default: only records arriving from now on)",
    )
    consume.add_argument(
        "--limit",
        type=_positive_int,
        default=None,
        metavar="N",
        help="stop after N records (default: no limit)",
    )
    consume.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop after S seconds without a record (default: wait forever)",
    )
    consume.add_argument(
        "--documents",
        action="store_true",
        help="only documents' records: chunks, complete/incomplete, tombstones (as "
        '{"type": "deleted", "doc_id": ...}); with --dead-letters, failed chunks',
    )
    add_settings_flags(consume, CLIENT_SETTINGS)

    sink = sub.add_parser(
        "sink",
        usage="embedstream sink [init [--dimensions N] | search QUESTION [--k K]] [--<name> V]",
        help="write the results topic to PostgreSQL/pgvector; init the table; search it",
        description="Run a store writer (a member of store_group_id) that keeps the vector "
        "store in step with the results topic; `init` creates the table; `search` prints the "
        "chunks nearest to a question.",
        formatter_class=_HelpFormatter,
    )
    sink.add_argument("action", nargs="?", choices=["run", "init", "search"], default="run")
    sink.add_argument("question", nargs="?", default=None, help="search: the text to look up")
    sink.add_argument("--k", type=_positive_int, default=5, help="search: how many chunks")
    sink.add_argument(
        "--dimensions", type=_positive_int, default=None, help="init: the vector size"
    )
    add_settings_flags(sink, ALL_SETTINGS)

    from embedstream.tools.top.app import add_cli_arguments as add_top_arguments
    from embedstream.tools.verify.app import add_cli_arguments as add_verify_arguments

    add_top_arguments(command("top", "live view of processors' /metrics"))
    add_verify_arguments(command("verify", "check every request got exactly one outcome"))

    from embedstream.tools.bench.options import add_cli_arguments as add_bench_arguments

    add_bench_arguments(
        command("bench", "measure the engine and the Kafka path against the provider's bound")
    )

    from embedstream.tools.demo.options import add_cli_arguments as add_demo_arguments

    add_demo_arguments(
        command("demo", "embedded broker + simulator + processor: a sparse phase, then a burst")
    )
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


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
        from embedstream.app import run_service

        await run_service(settings)
        return 0
    if command == "sink":
        return await _sink(ns)
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
    from embedstream import app_store

    if ns.action == "init":
        print(await app_store.init_store(settings, ns.dimensions))
    elif ns.action == "search":
        for hit in await app_store.search_store(settings, ns.question, ns.k):
            text = (hit.text or "").replace("\n", " ")
            print(f"{hit.distance:.4f}  {hit.doc_id}#{hit.chunk_seq}  {text[:200]}")
    else:
        await app_store.run_store_writer(settings)
    return 0


async def _topics(ns: argparse.Namespace) -> int:
    from embedstream.kafka import admin as topics
    from embedstream.kafka.clients import connection_for
    from embedstream.kafka.user_errors import kafka_user_errors

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
    from embedstream.kafka.topics import topic_settings
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
