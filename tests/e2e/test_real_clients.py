"""The online lane as real clients meet it, in `serve` and in `run`'s online lane (Kafka lanes
on the real broker), in front of a real `embedstream simulate` that wants a provider key:
the openai SDK for Python (sync and async) and for Node, LangChain's `OpenAIEmbeddings` with
its defaults (token-id arrays, tokenized by tiktoken's cl100k_base), LlamaIndex's
`OpenAIEmbedding`, and curl. Every vector is checked against the simulator's own.

Issue 42 found, this way: whitespace inputs refused (LlamaIndex's blank chunks), usage that
was the lane's estimate, a refused `dimensions` bisected into dozens of calls, an unknown
model (LangChain's and LlamaIndex's default) breaking the lane for everyone.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import openai
import pytest
from embedsim.protocol import token_ids_text
from embedsim.vectors import count_tokens, expected_vector
from pydantic import SecretStr

from tests.e2e.lanes import CALLER_KEY, Lane, Simulator, online_lane
from tests.e2e.real_clients import curl, node_client_dir, offline_tiktoken_cache

pytestmark = [pytest.mark.integration]

DIMS = 256  # the simulator's default


def same(got: npt.ArrayLike, want: npt.ArrayLike) -> bool:
    a, b = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-5, atol=1e-6))


def vector(model: str, text: str | Sequence[int], dims: int = DIMS) -> list[float]:
    """The simulator's vector of a text, or of token ids."""
    return expected_vector(model, text if isinstance(text, str) else token_ids_text(text), dims)


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    simulator = Simulator(tmp_path_factory.mktemp("provider"))
    simulator.start()
    yield simulator
    simulator.kill()


@pytest.fixture(scope="module", params=["serve", "run"])
def lane(
    request: pytest.FixtureRequest, provider: Simulator, bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Lane]:  # fmt: skip
    with online_lane(
        request.param, provider.url, tmp_path_factory.mktemp("lane"), bootstrap=bootstrap
    ) as running:
        yield running
    assert "Future exception was never retrieved" not in running.log_text()
    assert "Traceback" not in running.log_text()


def test_openai_python_sync(lane: Lane, provider: Simulator) -> None:
    client = openai.OpenAI(base_url=lane.base_url, api_key=CALLER_KEY, max_retries=0)
    one = client.embeddings.create(model="m", input="hello", encoding_format="float")
    assert same(one.data[0].embedding, vector("m", "hello"))
    assert one.usage.prompt_tokens == count_tokens("hello")  # the provider's count
    texts = [f"text {i}" for i in range(600)]
    many = client.embeddings.create(model="m", input=texts, encoding_format="float")
    assert [d.index for d in many.data] == list(range(600))
    assert all(same(d.embedding, vector("m", t)) for d, t in zip(many.data, texts, strict=True))
    ids = client.embeddings.create(model="m", input=[[10, 20, 30], [40]])  # base64: the default
    assert same(ids.data[0].embedding, vector("m", [10, 20, 30]))
    short = client.embeddings.create(model="m", input="short", dimensions=64)
    assert same(short.data[0].embedding, vector("m", "short", 64))
    blank = client.embeddings.create(model="m", input=[" ", "\t\n"], encoding_format="float")
    assert same(blank.data[1].embedding, vector("m", "\t\n"))
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model="m", input=["ok", ""])
    assert empty.value.body["param"] == "input[1]"  # type: ignore[index]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=lane.base_url, api_key="sk-wrong", max_retries=0).embeddings.create(
            model="m", input="x"
        )
    calls = provider.calls
    before = calls()
    client.embeddings.create(model="m", input=[f"other {i}" for i in range(50)], dimensions=32)
    pieces = calls() - before  # the calls 50 inputs are spread over, at once
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="m", input=texts[:50], dimensions=5000)
    assert time.monotonic() - started < 2.0
    assert refused.value.body["param"] == "dimensions"  # type: ignore[index]
    assert "5000" in refused.value.body["message"]  # type: ignore[index]
    assert calls() - before - pieces <= pieces  # never bisected: no call after the answers


async def test_openai_python_async(lane: Lane) -> None:
    client = openai.AsyncOpenAI(base_url=lane.base_url, api_key=CALLER_KEY, max_retries=0)
    texts = [f"question {i}" for i in range(50)]
    answers = await asyncio.gather(*(client.embeddings.create(model="m", input=t) for t in texts))
    await client.close()
    for text, answer in zip(texts, answers, strict=True):
        assert same(answer.data[0].embedding, vector("m", text))  # base64, decoded by the SDK
        assert answer.usage.prompt_tokens > 0


async def test_langchain_openai_embeddings_with_its_defaults(
    lane: Lane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(offline_tiktoken_cache(tmp_path / "tiktoken")))
    import tiktoken
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(base_url=lane.base_url, api_key=SecretStr(CALLER_KEY))
    model = embeddings.model  # text-embedding-ada-002: its default
    encoding = tiktoken.get_encoding("cl100k_base")
    texts = ["LangChain sends token ids", "a second document", "third\nwith a line break"]
    documents = embeddings.embed_documents(texts)
    query = embeddings.embed_query("what does LangChain send?")
    again = await embeddings.aembed_documents(texts)
    await embeddings.async_client._client.close()  # before the test's loop closes
    for text, got in zip(texts, documents, strict=True):
        want = np.array(vector(model, encoding.encode(text)))
        assert same(got, want / np.linalg.norm(want)) or same(got, want)
    assert len(query) == DIMS
    assert np.allclose(again, documents)


async def test_llamaindex_openai_embedding(lane: Lane) -> None:
    from llama_index.embeddings.openai import OpenAIEmbedding

    embedding = OpenAIEmbedding(api_base=lane.base_url, api_key=CALLER_KEY)
    chunks = ["a chunk of a document", " ", "another chunk"]  # " ": a blank chunk
    got = embedding.get_text_embedding_batch(chunks)
    query = embedding.get_query_embedding("a question")
    again = await embedding.aget_text_embedding_batch(chunks)
    await embedding._get_aclient().close()  # before the test's loop closes (reuse_client)
    model = embedding.model_name
    assert all(same(g, vector(model, c)) for g, c in zip(got, chunks, strict=True))
    assert same(query, vector(model, "a question"))
    assert np.allclose(again, got)


def test_openai_node(lane: Lane) -> None:
    folder = node_client_dir()
    done = subprocess.run(
        ["node", "openai_client.mjs", lane.base_url, CALLER_KEY],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["string_float"]["ok"]
    assert same(results["string_float"]["vectors"][0], vector("m", "hello node"))
    assert results["string_float"]["usage"]["prompt_tokens"] == count_tokens("hello node")
    assert same(results["string_base64_default"]["vectors"][0], vector("m", "hello node"))
    listed = results["list_600"]
    assert listed["count"] == 600 and listed["indices_in_order"]
    assert same(listed["first"], vector("m", "node text 0"))
    assert same(listed["last"], vector("m", "node text 599"))
    assert same(results["token_ids"]["vectors"][1], vector("m", [40]))
    assert same(results["dimensions"]["vectors"][0], vector("m", "short", 64))
    assert results["empty_string"]["status"] == 400
    assert results["empty_string"]["param"] == "input[1]"
    assert results["dimensions_refused"]["status"] == 400
    assert results["dimensions_refused"]["param"] == "dimensions"
    assert results["bad_key"]["status"] == 401


def test_curl(lane: Lane) -> None:
    auth = ["-H", f"Authorization: Bearer {CALLER_KEY}", "-H", "Content-Type: application/json"]
    url = f"{lane.base_url}/embeddings"
    status, body = curl(*auth, "-d", '{"model": "m", "input": "curl"}', url)
    assert status == 200
    assert same(json.loads(body)["data"][0]["embedding"], vector("m", "curl"))
    status, body = curl(*auth, "-d", '{"model": "m", "input": ', url)
    assert status == 400 and json.loads(body)["error"]["message"]
    status, _ = curl("-d", '{"model": "m", "input": "x"}', url)
    assert status == 401
    status, body = curl(*auth, f"{lane.base_url}/models")
    assert status == 200 and json.loads(body)["data"]


# ------------------------------------------------------- a model the provider does not serve


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    simulator = Simulator(
        tmp_path_factory.mktemp("vllm"), "--flavor", "vllm", "--served-model", "my-model"
    )
    simulator.start()
    yield simulator
    simulator.kill()


@pytest.mark.parametrize("kind", ["serve", "run"])
def test_an_unknown_model_is_that_callers_404_and_the_lane_serves_everyone_else(
    kind: str, vllm: Simulator, bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(offline_tiktoken_cache(tmp_path / "tiktoken")))
    from langchain_openai import OpenAIEmbeddings
    from llama_index.embeddings.openai import OpenAIEmbedding

    args = ("--provider-profile", "vllm", "--model", "my-model")
    with online_lane(kind, vllm.url, tmp_path, *args, bootstrap=bootstrap) as lane:
        client = openai.OpenAI(base_url=lane.base_url, api_key=CALLER_KEY, max_retries=0)
        before = vllm.errors(404)
        started = time.monotonic()
        with pytest.raises(openai.NotFoundError) as sdk:
            client.embeddings.create(model="text-embedding-ada-002", input="x")
        langchain = OpenAIEmbeddings(
            base_url=lane.base_url, api_key=SecretStr(CALLER_KEY), max_retries=0
        )  # its default model, its own retries off
        with pytest.raises(openai.NotFoundError):
            langchain.embed_query("x")
        with pytest.raises(openai.NotFoundError):
            OpenAIEmbedding(
                api_base=lane.base_url, api_key=CALLER_KEY, max_retries=0
            ).get_text_embedding("x")
        auth = f"Authorization: Bearer {CALLER_KEY}"
        refusal = '{"model": "nope", "input": "x"}'
        status, body = curl("-H", auth, "-d", refusal, f"{lane.base_url}/embeddings")
        answered_in = time.monotonic() - started
        served = client.embeddings.create(model="my-model", input=["a", "b"])
        ready = lane.readyz()
        time.sleep(6.0)  # a refused call held was sent again every 5 s after its caller left
        after = vllm.errors(404)
    assert sdk.value.body["param"] == "model"  # type: ignore[index]
    assert sdk.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert "text-embedding-ada-002" in sdk.value.body["message"]  # type: ignore[index]
    assert status == 404 and json.loads(body)["error"]["param"] == "model"
    assert answered_in < 5.0  # four refusals at once, not a 504 after 10 s
    assert same(served.data[1].embedding, vector("my-model", "b"))
    assert ready == 200
    assert after - before == 4  # one call each, never held nor sent again
