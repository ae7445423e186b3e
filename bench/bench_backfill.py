"""A migration filled by running processors, at full size (issue 31): a corpus in the documents
topic embedded into PostgreSQL by the simulator's `text-embedding-3-small`, then `embedstream
migrate start --model text-embedding-3-large --dimensions 64`; while the processor backfills
in its lowest lane, edits, new documents and deletes keep coming, and the processor and the
store writer are each SIGKILLed mid-backfill and started again. At the end the new
generation's tables are compared with the state the documents topic implies, row for row and
vector for vector, and the provider tokens spent for the new model with the plan's estimate.

    python bench/bench_backfill.py --bootstrap 127.0.0.1:39092 [--docs 1000] [--cache memory]

Processes as a user runs them (`embedstream run`, `embedstream sink`), the simulator and a
`redis-server` (cache=redis, the default) in this process, PostgreSQL from the pgserver wheel.
What a killed processor had embedded is not paid again either way: with ``--cache memory``
the restarted backfill skips the documents the new generation holds already
(`core/backfill_skips.py`). Prints one JSON object: the plan, the provider tokens of the new
model (the backfill's and the dual-written edits', an upper bound of the backfill's), their
ratio, the backfill's documents per second, and whether the tables match.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from pathlib import Path

import orjson
import psycopg
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedsim.vectors import count_tokens, expected_vector
from embedstream.core import configured
from embedstream.core.chunker import chunk_document
from embedstream.core.document_versions import default_version
from embedstream.core.intake import chunking_rules
from embedstream.core.tokens import estimate_tokens
from embedstream.kafka.client.admin import configured_specs, create_topics
from embedstream.kafka.client.clients import connection_for
from embedstream.settings import Settings, load_settings
from embedstream.stores.configured import store_config
from embedstream.stores.pgmigrate import GenerationStatus, Migrations
from embedstream.stores.pgvector import PgVectorStore
from embedstream.testing.redis import RedisServer
from embedstream.tools.bench.documents_scenario import publish_records
from embedstream.tools.embedded import free_port
from embedstream.tools.local_postgres import start_postgres

ROOT = Path(__file__).parents[1]
OLD, NEW, NEW_DIMENSIONS, OLD_DIMENSIONS = (
    "text-embedding-3-small",
    "text-embedding-3-large",
    64,
    32,
)
WORDS = [
    "river",
    "stone",
    "lantern",
    "orchard",
    "harbor",
    "meadow",
    "signal",
    "copper",
    "violet",
    "ember",
]


def text_of(rng: random.Random, doc: str) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))) + "."
                 for _ in range(rng.randint(10, 60))]  # fmt: skip
    return f"{doc}. " + " ".join(sentences)


def events(docs: dict[str, str | None]) -> list[tuple[bytes, bytes | None]]:
    return [(d.encode(), None if t is None else orjson.dumps({"doc_id": d, "text": t}))
            for d, t in docs.items()]  # fmt: skip


async def statuses(settings: Settings) -> list[GenerationStatus]:
    async with PgVectorStore(store_config(settings), create=False) as store:
        return await Migrations(store, settings.store_index).status()


async def until(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.5)


def matches(settings: Settings, generation: str, final: dict[str, str]) -> bool:
    """The new generation's chunk rows are the ones the documents topic implies."""
    new = load_settings(env={}, overrides={**_overrides(settings), "dimensions": NEW_DIMENSIONS})
    rules = chunking_rules(new, configured.provider_limits(new))
    want = []
    for doc_id, text in sorted(final.items()):
        chunks = chunk_document(text, rules, estimate_tokens)
        want += [(doc_id, default_version(text), c.seq, len(chunks), c.start, c.end,
                  expected_vector(NEW, c.text, NEW_DIMENSIONS)) for c in chunks]  # fmt: skip
    table = f'"{settings.store_schema}"."{settings.store_table}_{generation}"'
    with psycopg.connect(settings.store_dsn or "") as connection:
        rows = connection.execute(
            f"SELECT doc_id, version, chunk_seq, chunk_count, span_start, span_end, "
            f"embedding::text FROM {table} ORDER BY doc_id, chunk_seq"
        ).fetchall()
    got = [(*row[:6], orjson.loads(row[6])) for row in rows]
    return len(got) == len(want) and all(
        g[:6] == w[:6]
        and all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(g[6], w[6], strict=True))
        for g, w in zip(got, want, strict=True)
    )


def _overrides(settings: Settings) -> dict[str, object]:
    return {
        "bootstrap_servers": settings.bootstrap_servers, "topic_prefix": settings.topic_prefix,
        "store_dsn": settings.store_dsn, "store_table": settings.store_table,
        "topic_documents": settings.topic_documents,
    }  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--cache", choices=("redis", "memory"), default="redis")
    args = parser.parse_args()
    prefix = f"bf{uuid.uuid4().hex[:8]}."
    rng = random.Random(args.seed)
    postgres = start_postgres()
    with postgres, RedisServer() as redis:
        async with SimulatorServer(SimulatorConfig(base_ms=5, record_calls=True)) as sim:
            report = await migrate(args, prefix, rng, postgres.dsn, redis.url, sim)
    print(json.dumps(report, indent=2))


async def migrate(
    args: argparse.Namespace, prefix: str, rng: random.Random, dsn: str, redis_url: str,
    sim: SimulatorServer,
) -> dict[str, object]:  # fmt: skip
    table = f"bf_{uuid.uuid4().hex[:8]}"
    settings = load_settings(env={}, overrides={
        "bootstrap_servers": args.bootstrap, "topic_prefix": prefix, "store_dsn": dsn,
        "store_table": table, "topic_documents": prefix + "documents",
    })  # fmt: skip
    await create_topics(connection_for(settings), configured_specs(settings))
    common = ["--bootstrap-servers", args.bootstrap, "--topic-prefix", prefix,
              "--store-dsn", dsn, "--store-table", table,
              "--topic-documents", prefix + "documents"]  # fmt: skip
    run = [sys.executable, "-m", "embedstream.cli", "run", *common, "--base-url", sim.url,
           "--dimensions", str(OLD_DIMENSIONS), "--cache", args.cache,
           "--group-id", prefix + "group", "--metrics-port", str(free_port())]  # fmt: skip
    if args.cache == "redis":
        run += ["--cache-url", redis_url]
    sink = [sys.executable, "-m", "embedstream.cli", "sink", *common, "--store-model", OLD,
            "--store-group-id", prefix + "sink", "--metrics-port", str(free_port())]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'stream'}:{ROOT}"}
    corpus: dict[str, str | None] = {
        f"doc-{d:05}": text_of(rng, f"doc {d}") for d in range(args.docs)
    }
    await publish_records(settings, prefix + "documents", events(corpus))  # type: ignore[arg-type]
    processor = await asyncio.create_subprocess_exec(*run, env=env)
    writer = await asyncio.create_subprocess_exec(*sink, env=env)

    async def first_done() -> bool:
        try:
            found = await statuses(settings)
        except Exception:
            return False
        return len(found) == 1 and found[0].complete == args.docs

    await until(first_done, 1800, "the first generation")
    migrate = [sys.executable, "-m", "embedstream.cli", "migrate", "--store-dsn", dsn,
               "--store-table", table]  # fmt: skip
    started = await asyncio.create_subprocess_exec(
        *migrate, "start", "--model", NEW, "--dimensions", str(NEW_DIMENSIONS), env=env,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    said, _ = await started.communicate()
    new_id = said.decode().split()[2]
    [_, filling] = await statuses(settings)
    plan = filling.generation.plan or {}
    calls_before = len(sim.calls)
    started_at = time.monotonic()

    # The stream keeps flowing: edits, new documents, deletes; and two kills mid-backfill.
    ids = sorted(corpus)
    changes: dict[str, str | None] = {
        d: text_of(rng, d + " edited") for d in ids[: args.docs // 20]
    }
    changes |= {f"new-{i:04}": text_of(rng, f"new {i}") for i in range(args.docs // 50)}
    changes |= dict.fromkeys(ids[-(args.docs // 50) :])
    await asyncio.sleep(3)
    await publish_records(settings, prefix + "documents", events(changes))  # type: ignore[arg-type]
    await asyncio.sleep(3)
    processor.send_signal(signal.SIGKILL)
    await processor.wait()
    processor = await asyncio.create_subprocess_exec(*run, env=env)
    await asyncio.sleep(5)
    writer.send_signal(signal.SIGKILL)
    await writer.wait()
    writer = await asyncio.create_subprocess_exec(*sink, env=env)
    final = {d: t for d, t in {**corpus, **changes}.items() if t is not None}

    async def caught_up() -> bool:
        [active, new] = await statuses(settings)
        return (active.documents == new.documents == len(final) and new.lacking == 0
                and new.extra == 0)  # fmt: skip

    await until(caught_up, 3600, "the new generation")
    elapsed = time.monotonic() - started_at
    for process in (processor, writer):
        process.send_signal(signal.SIGTERM)
        await process.wait()
    new_calls = [c for c in sim.calls[calls_before:] if c.fields.get("model") == NEW
                 and c.status == 200]  # fmt: skip
    spent = sum(count_tokens(text) for call in new_calls for text in call.inputs)
    estimated = sum(estimate_tokens(text) for call in new_calls for text in call.inputs)
    # What the live stream's changes cost the new model (dual-written), not the backfill's.
    rules = chunking_rules(settings, configured.provider_limits(settings))
    changed = [t for t in changes.values() if t is not None]
    dual = sum(c.tokens for t in changed for c in chunk_document(t, rules, estimate_tokens))
    planned = max(1, int(plan.get("tokens", 1)))
    return {
        "documents": args.docs, "changes": len(changes), "generation": new_id,
        "cache": args.cache,
        "plan": plan, "new_model_calls": len(new_calls),
        "provider_tokens_new_model": spent, "estimated_tokens_sent": estimated,
        "estimated_sent_over_plan": round(estimated / planned, 4),
        "changes_estimated": dual,
        "backfill_sent_over_plan": round((estimated - dual) / planned, 4),
        "backfill_docs_per_s": round(args.docs / elapsed, 1),
        "tables_match": matches(settings, new_id, final),
    }  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
