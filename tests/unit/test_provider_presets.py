"""Each provider preset against the simulator's flavor of that provider, through both users of
the batch-call path: the in-process BatchingClient and the Kafka processor (on the in-memory
fakes, with the real embedder over HTTP). Every text gets its vector, no call breaks the
provider's limits (the simulator refuses one that does), and request fields the preset does
not take are refused before any call."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from embedsim import SimulatorConfig, SimulatorServer, expected_vector
from embedstream.engine.client import BatchingClient
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.errors import PermanentItemError
from embedstream.settings import Settings, load_settings
from embedstream.testing import eventually
from embedstream.wire import headers_dict

from tests.unit.harness import LOW, NAMES, item_bound, running

KEY = "sk-preset-key"
MODEL = "served-embedder"
PRESETS = ("openai", "azure", "vllm", "tei", "ollama")
# The request fields each preset passes on (the rest are refused at once).
TAKES_USER = {"openai": True, "azure": True, "vllm": True, "tei": True, "ollama": False}
TEXTS = [f"text number {i}" for i in range(100)]  # over TEI's 32 inputs per call


def flavor_config(preset: str) -> SimulatorConfig:
    return SimulatorConfig(
        flavor=preset, base_ms=0, auth_key=KEY, served_model=MODEL, record_calls=True
    )


def preset_settings(preset: str, sim: SimulatorServer, **extra: Any) -> dict[str, Any]:
    where = (
        {"azure_endpoint": sim.root_url}  # no deployment set: the model names it
        if preset == "azure"
        else {"base_url": sim.url}
    )
    return {"provider_profile": preset, "api_key": KEY, "model": MODEL, **where, **extra}


def assert_within_limits(sim: SimulatorServer, preset: str) -> None:
    assert sim.stats.errors == {}, sim.stats.errors  # no call refused: limits kept
    assert sim.stats.inputs == len(TEXTS)  # each text sent once
    most = max(len(call.inputs) for call in sim.calls)
    assert most <= sim.config.request_limits.max_inputs
    if preset == "tei":
        assert most == 32  # batches as large as TEI allows, no larger
    if preset == "azure":
        assert all(c.path.startswith(f"/openai/deployments/{MODEL}/embeddings?api-version=")
                   for c in sim.calls)  # fmt: skip
        assert all(c.headers.get("api-key") == KEY for c in sim.calls)


@pytest.mark.parametrize("preset", PRESETS)
async def test_the_client_gets_every_vector_within_the_preset_limits(preset: str) -> None:
    async with SimulatorServer(flavor_config(preset)) as sim:
        values = preset_settings(preset, sim, max_wait_ms=20)
        async with BatchingClient(**values) as client:
            vectors = await client.embed(TEXTS)
            user_call = client.embed("for someone", user="user-7") if TAKES_USER[preset] else None
            if user_call is not None:
                await user_call
            else:
                with pytest.raises(PermanentItemError) as refused:
                    await client.embed("for someone", user="user-7")
                assert refused.value.reason == "unsupported_parameter"
        if TAKES_USER[preset]:
            [call] = [c for c in sim.calls if c.inputs == ("for someone",)]
            assert call.fields["user"] == "user-7"
            sim.stats.inputs -= 1
    assert vectors == [expected_vector(MODEL, text, 256) for text in TEXTS]
    assert_within_limits(sim, preset)


async def _through_kafka(settings: Settings, requests: list[dict[str, Any]]) -> dict[str, str]:
    backend = OpenAIEmbedder.from_settings(settings)
    overrides = {
        name: getattr(settings, name)
        for name in ("provider_profile", "api_key", "model", "base_url", "azure_endpoint")
    }
    async with running(
        backend, max_batch_size=256, **item_bound(1000), max_wait_ms=20, **overrides
    ) as h:
        for doc in requests:
            h.cluster.produce(LOW.topic, orjson.dumps(doc), doc["id"].encode(), [], partition=0)

        def outcomes() -> dict[str, str]:
            ended = {}
            for record in h.results():
                result = orjson.loads(record.value or b"")
                text = next(d["text"] for d in requests if d["id"] == result["id"])
                right = result["embedding"] == expected_vector(MODEL, text, 256)
                ended[result["id"]] = "vector" if right else "wrong vector"
            for letter in h.cluster.records(NAMES.dead_letters):
                reason = headers_dict(letter.headers)["embedstream.error.reason"]
                ended[(letter.key or b"").decode()] = reason
            return ended

        await eventually(lambda: len(outcomes()) == len(requests), timeout_s=20)
        await h.all_inputs_finished()  # no call in flight when the backend closes
        await backend.close()
        return outcomes()


@pytest.mark.parametrize("preset", PRESETS)
async def test_the_processor_gets_every_vector_within_the_preset_limits(preset: str) -> None:
    requests = [{"id": f"r{i}", "text": text} for i, text in enumerate(TEXTS)]
    with_user = {"id": "u", "text": "for someone", "user": "user-7"}
    async with SimulatorServer(flavor_config(preset)) as sim:
        settings = load_settings(env={}, overrides=preset_settings(preset, sim))
        outcomes = await _through_kafka(settings, [*requests, with_user])
    expected = dict.fromkeys((r["id"] for r in requests), "vector")
    expected["u"] = "vector" if TAKES_USER[preset] else "unsupported_parameter"
    assert outcomes == expected
    if TAKES_USER[preset]:
        sim.stats.inputs -= 1
        # The user's text travelled alone: a batch never mixes users.
        [call] = [c for c in sim.calls if "for someone" in c.inputs]
        assert call.inputs == ("for someone",) and call.fields["user"] == "user-7"
    assert_within_limits(sim, preset)
