"""What a migration pays against its plan (issue 43), as a new user runs it: documents in the
documents topic, some edited twice (every version still in the topic: Kafka never compacts the
active segment), `migrate plan`, `migrate start` of another model, nothing published after.
The backfill pays for each document's latest version once: the texts the new model was sent,
estimated as the plan estimates them, within 5% of the plan's tokens. It used to pay for every
version it read, and for a text each time a version or a call wanted it: 2.05x the plan."""

from __future__ import annotations

import dataclasses
import random
import uuid

import orjson
import pytest
from embedsim.config import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.app import store_watch
from embedstream.app.migrate import run_migration
from embedstream.core.tokens import estimate_tokens
from embedstream.testing import eventually
from embedstream.testing.postgres import PostgresServer

from tests.integration.helpers import create_all_topics, publish, running_service, settings_for
from tests.integration.test_backfill import NEW_DIMENSIONS, NEW_MODEL, OLD_MODEL, statuses, text_of
from tests.integration.test_model_change import running_writer

pytestmark = pytest.mark.integration


def edited(rng: random.Random, text: str) -> str:
    """The text with its last sentence written anew: most of its chunks stay as they were."""
    head, _, _ = text.rstrip(".").rpartition(". ")
    return f"{head}. {text_of(rng, rng.randint(0, 10**6)).split('. ', 2)[1]}."


def event(doc_id: str, text: str) -> tuple[bytes, bytes]:
    return doc_id.encode(), orjson.dumps({"doc_id": doc_id, "text": text})


async def test_a_migration_pays_each_latest_version_once_within_its_plan(
    bootstrap: str, unique_prefix: str, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_watch, "WATCH_INTERVAL_S", 0.5)
    async with SimulatorServer(SimulatorConfig(base_ms=1, record_calls=True)) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, store_dsn=postgres.dsn,
            store_table=f"bfc_{uuid.uuid4().hex[:10]}", store_group_id=unique_prefix + "sink",
            store_model=OLD_MODEL, dimensions=16, topic_documents=unique_prefix + "documents",
            chunk_max_tokens=48, chunk_min_tokens=16, chunk_overlap_tokens=0,
        )  # fmt: skip
        new = dataclasses.replace(settings)  # the same chunks, another model
        await create_all_topics(settings)
        rng = random.Random(43)
        corpus = {f"doc-{d:02}": text_of(rng, d) for d in range(20)}
        topic = unique_prefix + "documents"
        async with running_writer(settings), running_service(settings):
            await publish(bootstrap, topic, [event(d, t) for d, t in corpus.items()])
            for _ in range(2):  # ten of them edited twice: three versions each in the topic
                for doc_id in sorted(corpus)[:10]:
                    corpus[doc_id] = edited(rng, corpus[doc_id])
                await publish(bootstrap, topic, [event(d, corpus[d]) for d in sorted(corpus)[:10]])

            async def stored() -> bool:
                [active] = await statuses(settings)
                return active.documents == active.complete == len(corpus) and active.lacking is None

            await eventually(stored, 60, 0.2)
            await eventually(lambda: not simulator.stats.in_flight, 10, 0.05)
            planned = await run_migration(new, "plan", model=NEW_MODEL, dimensions=NEW_DIMENSIONS)
            said = await run_migration(new, "start", model=NEW_MODEL, dimensions=NEW_DIMENSIONS)
            new_id = said[0].split()[2]
            [_, filling] = await statuses(settings)
            plan = filling.generation.plan
            assert plan is not None and plan["documents"] == len(corpus)

            async def filled() -> bool:
                [_, filling] = await statuses(settings)
                return filling.complete == len(corpus) and filling.lacking == 0

            await eventually(filled, 90, 0.3)
        sent = [text for call in simulator.calls if call.fields.get("model") == NEW_MODEL
                for text in call.inputs]  # fmt: skip
    tokens = sum(map(estimate_tokens, sent))  # as the plan counts them
    print(f"new model: {len(sent)} inputs, {tokens:,} tokens for a plan of {plan['chunks']:,} "
          f"chunks, {plan['tokens']:,} tokens ({tokens / plan['tokens']:.2f}x)")  # fmt: skip
    assert f"  tokens     {plan['tokens']:,}" in "\n".join(planned)
    assert filling.generation.id == new_id
    assert tokens <= 1.05 * plan["tokens"], (
        f"{len(sent)} inputs, {tokens:,} tokens sent for a plan of {plan['chunks']:,} chunks, "
        f"{plan['tokens']:,} tokens ({tokens / plan['tokens']:.2f}x)"
    )
    assert len(sent) == len(set(sent))  # each text paid once
