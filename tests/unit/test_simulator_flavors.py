"""The simulator imitates each provider's URL shape, authentication, limits and error bodies,
over real HTTP (raw aiohttp requests, so nothing but the simulator decides what is sent)."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from embedsim import SimulatorConfig, SimulatorServer, expected_vector
from embedsim.cli import add_cli_arguments, config_from_args
from embedsim.flavors import FLAVOR_NAMES


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> tuple[int, Any]:
    async with http.post(url, json=body, headers=headers) as response:
        text = await response.text()
        if response.content_type == "application/json":
            return response.status, await response.json()
        return response.status, text


def sim(flavor: str, **config: Any) -> SimulatorServer:
    return SimulatorServer(SimulatorConfig(flavor=flavor, base_ms=0, **config))


AZURE_PATH = "/openai/deployments/emb/embeddings?api-version=2024-10-21"


@pytest.mark.parametrize(
    ("flavor", "path"),
    [("openai", "/v1/embeddings"), ("azure", AZURE_PATH), ("tei", "/v1/embeddings"),
     ("vllm", "/v1/embeddings"), ("ollama", "/v1/embeddings")],
)  # fmt: skip
async def test_each_flavor_answers_on_its_own_route_only(
    http: aiohttp.ClientSession, flavor: str, path: str
) -> None:
    other = "/v1/embeddings" if flavor == "azure" else AZURE_PATH
    async with sim(flavor) as server:
        status, body = await post(http, server.root_url + path, {"model": "m", "input": ["hi"]})
        assert status == 200, body
        assert body["data"][0]["embedding"] == expected_vector("m", "hi", 256)
        status, _ = await post(http, server.root_url + other, {"model": "m", "input": ["hi"]})
        assert status == 404


async def test_azure_wants_the_api_key_header_and_an_api_version(
    http: aiohttp.ClientSession,
) -> None:
    body = {"input": ["hi"]}
    async with sim("azure", auth_key="azure-key") as server:
        url = server.root_url + AZURE_PATH
        status, answer = await post(http, url, body, **{"api-key": "azure-key"})
        # No model in the body: the deployment names it.
        assert status == 200 and answer["data"][0]["embedding"] == expected_vector("emb", "hi", 256)
        status, answer = await post(http, url, body, Authorization="Bearer azure-key")
        assert status == 401 and "Access denied" in answer["error"]["message"]
        no_version = server.root_url + "/openai/deployments/emb/embeddings"
        status, answer = await post(http, no_version, body, **{"api-key": "azure-key"})
        assert status == 404 and answer["error"]["message"] == "Resource not found"
        status, answer = await post(http, url, {**body, "input_type": "query"},
                                    **{"api-key": "azure-key"})  # fmt: skip
        assert status == 200  # Azure reads input_type; OpenAI would refuse it:
    async with sim("openai") as server:
        status, answer = await post(
            http, server.url + "/embeddings", {"model": "m", "input": ["hi"], "input_type": "q"}
        )
        assert status == 400 and answer["error"]["code"] == "unknown_parameter"


async def test_tei_takes_32_inputs_ignores_the_model_and_answers_in_its_own_shape(
    http: aiohttp.ClientSession,
) -> None:
    async with sim("tei", served_model="BAAI/bge-small-en-v1.5") as server:
        url = server.url + "/embeddings"
        status, answer = await post(http, url, {"model": "whatever", "input": ["x"] * 32})
        assert status == 200
        assert answer["data"][0]["embedding"] == expected_vector("BAAI/bge-small-en-v1.5", "x", 256)
        status, answer = await post(http, url, {"input": ["x"] * 33, "unknown_field": 1})
        assert (status, answer) == (
            422,
            {"message": "batch size 33 > maximum allowed batch size 32", "code": 422,
             "type": "Validation"},
        )  # fmt: skip
        long_text = "word " * 50_000  # cut, not refused
        status, _ = await post(http, url, {"input": [long_text]})
        assert status == 200
        status, _ = await post(http, url, {"input": ["a" * 2_100_000]})
        assert status == 413  # TEI's 2 MB payload limit


async def test_vllm_serves_one_model_and_refuses_dimensions_without_matryoshka(
    http: aiohttp.ClientSession,
) -> None:
    async with sim("vllm", served_model="BAAI/bge-m3", matryoshka=False) as server:
        url = server.url + "/embeddings"
        status, answer = await post(http, url, {"model": "other", "input": ["x"]})
        assert status == 404 and answer["object"] == "error"
        assert answer["message"] == "The model `other` does not exist."
        status, answer = await post(http, url, {"model": "BAAI/bge-m3", "input": ["x"],
                                                "dimensions": 64})  # fmt: skip
        assert status == 400 and "does not support matryoshka representation" in answer["message"]
        status, answer = await post(http, url, {"model": "BAAI/bge-m3", "input": ["w " * 9000]})
        assert status == 400 and "maximum context length is 8192 tokens" in answer["message"]


async def test_ollama_needs_no_key_and_404s_a_model_not_pulled(
    http: aiohttp.ClientSession,
) -> None:
    async with sim("ollama", served_model="nomic-embed-text", auth_key="ignored") as server:
        url = server.url + "/embeddings"
        status, _ = await post(http, url, {"model": "nomic-embed-text", "input": ["x"],
                                           "user": "dropped"})  # fmt: skip
        assert status == 200  # no key sent, and `user` ignored as Ollama ignores it
        status, answer = await post(http, url, {"model": "llama3", "input": ["x"]})
        assert status == 404
        assert answer["error"]["message"] == 'model "llama3" not found, try pulling it first'


def test_the_simulate_command_takes_a_flavor() -> None:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    config = config_from_args(parser.parse_args(["--flavor", "tei", "--served-model", "e5"]))
    assert (config.flavor, config.served_model, config.request_limits.max_inputs) == (
        "tei",
        "e5",
        32,
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--flavor", "bedrock"])
    assert set(FLAVOR_NAMES) == {"openai", "azure", "tei", "vllm", "ollama"}
