"""The simulator's real local model (``--model-backend wordllama``), through its HTTP API.

The vectors must carry meaning (a related text ranks above an unrelated one for the same
query), keep the OpenAI contract (unit length, ``dimensions`` honoured, float and base64 the
same numbers) and never be the hash vectors the tests and benchmarks rely on.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
from collections.abc import AsyncIterator, Sequence

import aiohttp
import pytest
from embedsim import (
    SimulatorConfig,
    SimulatorServer,
    add_cli_arguments,
    config_from_args,
    decode_base64,
    expected_vector,
)

if importlib.util.find_spec("wordllama") is None:
    if os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") == "1":
        raise RuntimeError("wordllama is missing: pip install 'embedstream[local-model]'")
    pytest.skip("wordllama is not installed (the local-model extra)", allow_module_level=True)

MODEL = "wordllama-l2-supercat"


@pytest.fixture
async def local() -> AsyncIterator[SimulatorServer]:
    server = SimulatorServer(SimulatorConfig(model_backend="wordllama", base_ms=0))
    await server.start()
    yield server
    await server.stop()


async def embed(
    server: SimulatorServer, texts: Sequence[str], **fields: object
) -> list[list[float]]:
    body = {"model": MODEL, "input": list(texts), **fields}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{server.url}/embeddings", json=body) as response,
    ):
        assert response.status == 200, await response.text()
        answer = await response.json()
    items = sorted(answer["data"], key=lambda item: item["index"])
    return [
        decode_base64(item["embedding"])
        if isinstance(item["embedding"], str)
        else item["embedding"]
        for item in items
    ]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.hypot(*a) / math.hypot(*b)


# (query, related, unrelated): any working embedding model puts the middle one nearer.
RANKINGS = [
    ("How do I bake sourdough bread?", "Knead the dough, let it rise, then bake the loaf.",
     "The central bank raised interest rates by a quarter point."),
    ("symptoms of the flu", "Fever, cough and aching muscles are common signs of influenza.",
     "The striker scored twice in the second half of the match."),
    ("Kafka consumer group rebalance", "Partitions are reassigned when a consumer joins the group.",
     "Tomatoes need full sun and regular watering in summer."),
]  # fmt: skip


@pytest.mark.parametrize(("query", "related", "unrelated"), RANKINGS)
async def test_a_related_text_ranks_above_an_unrelated_one(
    local: SimulatorServer, query: str, related: str, unrelated: str
) -> None:
    q, near, far = await embed(local, [query, related, unrelated])
    assert cosine(q, near) > cosine(q, far) + 0.05


async def test_vectors_are_unit_float32_of_the_asked_length_and_formats_agree(
    local: SimulatorServer,
) -> None:
    texts = ["vector databases store embeddings", " ", "?!"]  # " ": no token at all
    floats = await embed(local, texts)
    packed = await embed(local, texts, encoding_format="base64")
    assert floats == packed  # float32 numbers either way
    assert all(len(v) == 256 and math.isclose(math.hypot(*v), 1.0, rel_tol=1e-5) for v in floats)
    short = await embed(local, texts[:1], dimensions=64)
    assert len(short[0]) == 64 and math.isclose(math.hypot(*short[0]), 1.0, rel_tol=1e-5)
    # A prefix, renormalised (like OpenAI's shortened vectors), not another vector.
    assert cosine(short[0], floats[0][:64]) > 0.9999


async def test_the_real_model_is_not_the_hash_vectors(local: SimulatorServer) -> None:
    (vector,) = await embed(local, ["a text"])
    assert cosine(vector, expected_vector(MODEL, "a text", 256)) < 0.5


async def test_more_dimensions_than_the_model_has_is_a_400(local: SimulatorServer) -> None:
    body = {"model": MODEL, "input": ["x"], "dimensions": 257}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{local.url}/embeddings", json=body) as response,
    ):
        assert response.status == 400
        assert "1..256" in (await response.json())["error"]["message"]


def test_the_command_line_selects_the_backend_and_hash_stays_the_default() -> None:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    assert config_from_args(parser.parse_args([])).model_backend == "hash"
    chosen = config_from_args(parser.parse_args(["--model-backend", "wordllama"]))
    assert chosen.model_backend == "wordllama" and chosen.dimension_cap == 256
    with pytest.raises(ValueError, match="model_backend"):
        SimulatorConfig(model_backend="bert")
