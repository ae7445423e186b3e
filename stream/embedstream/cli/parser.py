"""The `embedstream` command line's parser: every command, its options and their help."""

from __future__ import annotations

import argparse
from pathlib import Path

from embedstream.settings import FIELDS, Group, spec
from embedstream.settings.commands import RUN_SETTINGS, SERVE_SETTINGS
from embedstream.settings.flags import CONNECTION_SETTINGS, add_settings_flags

# What `embedstream --help` says the program is, in one line.
DESCRIPTION = "Kafka text events in, embeddings out, batched for any OpenAI-compatible API."

ALL_SETTINGS = RUN_SETTINGS
COMMON_SETTINGS = CONNECTION_SETTINGS
# The one-shot client commands also take the log level: DEBUG shows tracebacks and every line.
CLIENT_SETTINGS = (*COMMON_SETTINGS, "log_level")
# `migrate`: the store, the chunking and the provider's limits (what a plan counts with), and
# the broker (status reads the documents topic, the backfill's source); the model of the
# generation it goes to is the command's --model, not the processors' setting.
MIGRATE_SETTINGS = tuple(
    name
    for name in FIELDS
    if spec(name).group
    in (Group.STORE, Group.DOCUMENTS, Group.BATCHING, Group.LIMITS, Group.BATCH_JOBS)
    or (spec(name).group is Group.PROVIDER and name not in ("model", "dimensions"))
    or name in ("log_level", "log_format", *CONNECTION_SETTINGS)
)
# produce --format: where the schema is registered, and which fields key the records.
REGISTRY_CLIENT_SETTINGS = ("schema_registry_url", "field_map")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embedstream", description=DESCRIPTION, formatter_class=_HelpFormatter
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

    serve = sub.add_parser(
        "serve",
        usage="embedstream serve [--config FILE] [--<setting> VALUE ...]",
        help="serve the online lane alone: an OpenAI-compatible, batching, caching "
        "/v1/embeddings gateway to the provider, no Kafka",
        description="Serve POST /v1/embeddings and GET /v1/models on http_host:http_port "
        "(8080 when unset), batching and caching the callers' texts in front of the provider. "
        "Settings as for `run`, minus Kafka's.",
        formatter_class=_HelpFormatter,
    )
    add_settings_flags(serve, SERVE_SETTINGS)

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
        usage="embedstream sink [init | search QUESTION [--k K]] [--<name> V]",
        help="write the results topic to PostgreSQL/pgvector; init the table; search it",
        description="Run a store writer (a member of store_group_id) that keeps the vector "
        "store in step with the results topic; `init` creates the table; `search` prints the "
        "chunks nearest to a question.",
        formatter_class=_HelpFormatter,
    )
    sink.add_argument(
        "action",
        nargs="?",
        choices=["run", "init", "search"],
        default="run",
        help="run: write results to the store; init: create the tables now (of "
        "store_model and store_dimensions); "
        "search: the nearest chunks to QUESTION (default: run)",
    )
    sink.add_argument("question", nargs="?", default=None, help="search: the text to look up")
    sink.add_argument("--k", type=_positive_int, default=5, help="search: how many chunks")
    sink.add_argument(
        "--online-url",
        type=_http_url,
        default=None,
        metavar="URL",
        help="search: embed the question through this online lane (http://host:port/v1 of "
        "`embedstream serve` or `run`'s), on the processors' provider budget; default: call "
        "the provider directly",
    )
    sink.add_argument(
        "--online-key-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="search: a file holding the key the online lane's callers send",
    )
    add_settings_flags(sink, ALL_SETTINGS)

    migrate = command(
        "migrate",
        "change the store's model: plan a re-embed, start a generation, cut over to it",
    )
    migrate.usage = (
        "embedstream migrate {plan,start,status,cutover,rollback,drop,cancel} [--model M] "
        "[--dimensions N] [--via {sync,batch}] [--allow-missing] [--<setting> V]"
    )
    migrate.description = (
        "Change the index generation (model, dimensions, chunking) of the store of "
        "store_dsn/store_table, one migration at a time: plan (a dry run: what re-embedding "
        "the stored documents costs), start (register the new generation: the store writer "
        "writes its results beside the active one's), status, cutover (in one transaction, "
        "once the new generation has every document), rollback, drop (the old generation), "
        "cancel (the new one)."
    )
    migrate.add_argument(
        "action",
        choices=["plan", "start", "status", "cutover", "rollback", "drop", "cancel"],
        help="what to do (see above)",
    )
    migrate.add_argument(
        "--model",
        default=None,
        help="plan, start: the new generation's model (default: the active generation's)",
    )
    migrate.add_argument(
        "--dimensions",
        type=_positive_int,
        default=None,
        help="plan, start: the dimensions it asks for (default: the model's own, or the active "
        "generation's when the model stays); chunking comes from the chunk_* settings",
    )
    migrate.add_argument(
        "--via",
        choices=["sync", "batch"],
        default=None,
        help="start: how the backfill embeds: sync calls, or the provider's batch jobs (half "
        "the price, answered within a day); default: the migrate_via setting",
    )
    migrate.add_argument(
        "--allow-missing",
        action="store_true",
        help="cutover: go ahead even if the new generation lacks documents, and list them",
    )
    add_settings_flags(migrate, MIGRATE_SETTINGS)

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
        command("demo", "embedded broker + simulator + processor: sparse, then backlog vs high")
    )
    return parser


def _http_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"must start with http:// or https://, got {text!r}")
    return text


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value
