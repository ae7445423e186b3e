"""`embedstream migrate` (and `sink`'s refusal without a model) as a user runs them, against a
real PostgreSQL with pgvector: a whole migration told in a few lines, and every mistake one
line with exit status 2, no traceback."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import IndexGeneration
from embedstream.stores.pgvector import PgStoreConfig, PgVectorStore
from embedstream.testing.postgres import PostgresServer
from embedstream.wire import ChunkResult, DocumentComplete, OutputRecord

from tests.e2e.test_cli_messages import embedstream

pytestmark = pytest.mark.integration

RULES = ChunkingRules()  # the settings' defaults: what the commands compute
OLD = IndexGeneration("model-a", None, RULES)
NEW = IndexGeneration("model-b", 4, RULES)


def records(generation: IndexGeneration, dims: int, documents: int = 5) -> list[OutputRecord]:
    out: list[OutputRecord] = []
    for d in range(documents):
        text = f"document {d} says something"
        out.append(ChunkResult(f"d{d}", "v1", 0, 1, (0, len(text)), [1.0 + d] * dims,
                               generation.model, dims, 7, False, None, 1, 1.0, text,
                               generation.id))  # fmt: skip
        out.append(DocumentComplete(f"d{d}", "v1", 1, None, generation.id))
    return out


def write(dsn: str, table: str, batch: list[OutputRecord]) -> None:
    async def apply() -> None:
        config = PgStoreConfig(dsn=dsn, table=table, model=OLD.model, chunking=RULES)
        async with PgVectorStore(config) as store:
            assert await store.apply(batch) == []

    asyncio.run(apply())


def one_line(args: list[str]) -> str:
    done = embedstream(*args)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_migration_from_plan_to_drop(postgres: PostgresServer) -> None:
    table = f"m_{uuid.uuid4().hex[:10]}"
    store = ["--store-dsn", postgres.dsn, "--store-table", table]
    write(postgres.dsn, table, records(OLD, 8))

    plan = embedstream("migrate", "plan", "--model", "model-b", "--dimensions", "4", *store)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[0].startswith(f"plan: {OLD.id} -> {NEW.id} (model 'model-b'")
    assert "  documents  5" in plan.stdout and "  chunks     5  " in plan.stdout
    assert "no rate limit set" in plan.stdout
    paced = embedstream("migrate", "plan", "--model", "model-b", "--dimensions", "4",
                        "--rate-limit-rpm", "60", "--max-batch-size", "2", *store)  # fmt: skip
    assert "  calls      3 or more  (2 inputs" in paced.stdout
    assert "0.1 min or more at the rate limits" in paced.stdout  # 3 calls at 60 a minute
    assert "  cost       no price for 'model-b' in token_prices" in plan.stdout
    priced = embedstream("migrate", "plan", "--model", "model-b", "--dimensions", "4",
                         "--token-prices", "model-b=2.0", *store)  # fmt: skip
    tokens = int(priced.stdout.split("  tokens     ")[1].split()[0].replace(",", ""))
    # $2 a million sync, the openai preset's half through batch jobs.
    assert (f"  cost       ${tokens * 2 / 1e6:,.4f} in sync calls, ${tokens / 1e6:,.4f} through "
            "batch jobs (--via batch, within a day); at token_prices") in priced.stdout  # fmt: skip

    started = embedstream("migrate", "start", "--model", "model-b", "--dimensions", "4", *store)
    assert started.returncode == 0 and f"started generation {NEW.id}" in started.stdout
    line = one_line(["migrate", "cutover", *store])
    assert line.startswith(f"embedstream: error: generation {NEW.id} lacks 5 not caught up")

    write(postgres.dsn, table, records(NEW, 4))
    status = embedstream("migrate", "status", *store)
    assert status.returncode == 0
    assert f"{OLD.id}  active  model 'model-a', its own dimensions (8)" in status.stdout
    assert f"{NEW.id}  new     model 'model-b', 4 dimensions" in status.stdout
    assert "lacking 0, extra 0" in status.stdout
    # The provider's tokens (7 a chunk); the estimate of what it holds against the plan's.
    assert "tokens 35; estimated tokens 50 of 50 planned" in status.stdout

    cut = embedstream("migrate", "cutover", *store)
    assert cut.returncode == 0 and cut.stdout.startswith(f"cut over: public.{table} reads "
                                                         f"generation {NEW.id}")  # fmt: skip
    back = embedstream("migrate", "rollback", *store)
    assert back.returncode == 0 and f"reads generation {OLD.id} (" in back.stdout
    assert embedstream("migrate", "cutover", *store).returncode == 0
    dropped = embedstream("migrate", "drop", *store)
    assert dropped.returncode == 0 and f"dropped generation {OLD.id}" in dropped.stdout
    last = embedstream("migrate", "status", *store).stdout.splitlines()
    assert last[0].startswith(f"{NEW.id}  active") and len(last) == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["migrate", "rollback"], "embedstream: error: no generation kept to roll back to"),
        (["migrate", "drop"], "embedstream: error: no generation kept from a cutover to drop"),
        (["migrate", "cancel"], "embedstream: error: no new generation to cancel"),
        (["migrate", "cutover"], "embedstream: error: no generation to cut over to"),
        (["migrate", "start"], "embedstream: error: the active generation"),
    ],
)
def test_a_command_that_does_not_apply_is_one_line(
    postgres: PostgresServer, args: list[str], says: str
) -> None:
    table = f"m_{uuid.uuid4().hex[:10]}"
    write(postgres.dsn, table, records(OLD, 8))
    line = one_line([*args, "--store-dsn", postgres.dsn, "--store-table", table])
    assert line.startswith(says)


def test_an_empty_store_has_nothing_to_migrate(postgres: PostgresServer) -> None:
    table = f"m_{uuid.uuid4().hex[:10]}"
    line = one_line(["migrate", "plan", "--model", "b", "--store-dsn", postgres.dsn,
                     "--store-table", table, "--store-model", "a"])  # fmt: skip
    assert "the store has no vectors yet: nothing to migrate" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["migrate", "status", "--model", "x"], "migrate status takes no --model"),
        (["migrate", "plan", "--allow-missing"], "--allow-missing goes with migrate cutover"),
        (["migrate", "plan", "--via", "batch"], "--via goes with migrate start only"),
        (["migrate", "start", "--via", "batch", "--provider-profile", "vllm", "--store-dsn",
          "postgresql://nobody@127.0.0.1:1/x"], "setting migrate_via (EMBEDSTREAM_MIGRATE_VIA): "
         "asks for batch jobs, but provider_profile vllm takes none"),
        (["migrate", "status"], "setting store_dsn (EMBEDSTREAM_STORE_DSN)"),
        (["migrate", "sideways"], "invalid choice: 'sideways'"),
        (["sink", "--store-dsn", "postgresql://nobody@127.0.0.1:1/x"],
         "setting store_model (EMBEDSTREAM_STORE_MODEL): embedstream sink needs the model"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_line_before_any_connection(args: list[str], says: str) -> None:
    done = embedstream(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    # A command-line mistake comes after the command's usage line, as argparse has it.
    assert says in done.stderr.strip().splitlines()[-1]
