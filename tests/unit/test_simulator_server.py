"""Tests of the simulator over real HTTP: the openai client and raw aiohttp requests.

No assertion depends on wall-clock timing: latency is either zero, gated by an
injected sleep, or only bounded from one side.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from embedsim import (
    SimulatorConfig,
    SimulatorServer,
    add_cli_arguments,
    config_from_args,
    decode_base64,
    expected_vector,
    serve_forever,
)
from embedstream.testing import eventually
from multidict import CIMultiDictProxy

MODEL = "text-embedding-3-small"
FAST = SimulatorConfig(base_ms=0)

Start = Callable[..., Awaitable[SimulatorServer]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Start simulators on free ports; all are stopped after the test."""
    servers: list[SimulatorServer] = []

    async def _start(config: SimulatorConfig = FAST, **kwargs: Any) -> SimulatorServer:
        server = SimulatorServer(config, **kwargs)
        await server.start()
        servers.append(server)
        return server

    yield _start
    for server in servers:
        await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def client(server: SimulatorServer, api_key: str = "x") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url, api_key=api_key, max_retries=0)


async def post(
    http: aiohttp.ClientSession,
    server: SimulatorServer,
    body: object,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, CIMultiDictProxy[str]]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    async with http.post(f"{server.url}/embeddings", data=raw, headers=headers) as response:
        return response.status, await response.json(), response.headers


async def get_json(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as response:
        assert response.status == 200
        return await response.json()


async def admin_faults(http: aiohttp.ClientSession, server: SimulatorServer, body: object) -> Any:
    async with http.post(f"{server.root_url}/admin/faults", data=orjson.dumps(body)) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def wait_until(condition: Callable[[], bool]) -> None:
    """Until the server's counters say so (they signal nothing); the generous timeout only
    guards against hangs."""
    await eventually(condition, timeout_s=30)


# --------------------------------------------------------------------------- happy paths


async def test_url_points_at_v1_on_loopback(start: Start) -> None:
    server = await start()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", server.url)
    with pytest.raises(RuntimeError):
        _ = SimulatorServer().url


async def test_openai_client_default_base64_decodes_to_expected_vectors(start: Start) -> None:
    server = await start()
    texts = ["alpha", "beta gamma", "δέλτα, with punctuation!"]
    async with client(server) as c:
        result = await c.embeddings.create(model=MODEL, input=texts)
    assert result.model == MODEL
    assert [item.index for item in result.data] == [0, 1, 2]
    for item in result.data:
        # expected_vector is float32-exact, so the decoded base64 matches exactly.
        assert item.embedding == expected_vector(MODEL, texts[item.index], 256)
    assert result.usage.prompt_tokens == result.usage.total_tokens == 1 + 2 + 5


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
async def test_openai_client_explicit_format_and_dimensions(
    start: Start, encoding_format: Any
) -> None:
    server = await start()
    async with client(server) as c:
        result = await c.embeddings.create(
            model=MODEL, input="hello", dimensions=64, encoding_format=encoding_format
        )
    [item] = result.data
    embedding = item.embedding
    if encoding_format == "base64":  # the client leaves an explicitly requested format alone
        assert isinstance(embedding, str)
        embedding = decode_base64(embedding)
    assert embedding == expected_vector(MODEL, "hello", 64)


async def test_default_dimensions_are_configurable(start: Start) -> None:
    server = await start(SimulatorConfig(base_ms=0, default_dimensions=12))
    async with client(server) as c:
        result = await c.embeddings.create(model=MODEL, input="x", encoding_format="float")
    assert len(result.data[0].embedding) == 12


@pytest.mark.parametrize("encoding_format", ["float", "base64", None])
async def test_raw_response_shape(
    start: Start, http: aiohttp.ClientSession, encoding_format: str | None
) -> None:
    server = await start()
    body: dict[str, Any] = {"model": "m", "input": ["a b", "c"], "dimensions": 8, "user": "u"}
    if encoding_format is not None:
        body["encoding_format"] = encoding_format
    status, payload, headers = await post(http, server, body)
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    assert payload["object"] == "list"
    assert payload["model"] == "m"
    assert payload["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    for index, (item, text) in enumerate(zip(payload["data"], ["a b", "c"], strict=True)):
        assert item.keys() == {"object", "index", "embedding"}
        assert (item["object"], item["index"]) == ("embedding", index)
        embedding = item["embedding"]
        if encoding_format == "base64":
            embedding = decode_base64(embedding)
        assert embedding == expected_vector("m", text, 8)


async def test_max_size_request_is_served(start: Start) -> None:
    server = await start()
    texts = [f"text {i}" for i in range(2048)]
    async with client(server) as c:
        result = await c.embeddings.create(model=MODEL, input=texts)
    assert len(result.data) == 2048
    assert result.data[2047].embedding == expected_vector(MODEL, "text 2047", 256)


# --------------------------------------------------------------------------- 400s


INVALID: list[tuple[str, object, str | None]] = [
    ("empty string", {"model": "m", "input": ["a", "", "c"]}, "input[1]"),
    ("too many inputs", {"model": "m", "input": ["x"] * 2049}, "input"),
    ("input too long", {"model": "m", "input": ["a", "b", "a " * 8193]}, "input[2]"),
    ("request too long", {"model": "m", "input": ["a " * 8192] * 37}, "input"),
    ("wrong type", {"model": "m", "input": ["a", "b", "c", 4]}, "input[3]"),
    ("missing model", {"input": ["a"]}, "model"),
    ("bad dimensions", {"model": "m", "input": "a", "dimensions": 5000}, "dimensions"),
    ("bad format", {"model": "m", "input": "a", "encoding_format": "hex"}, "encoding_format"),
    ("not json", b"{oops", None),
    ("not an object", [1, 2], None),
]


@pytest.mark.parametrize(
    ("body", "param"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
async def test_invalid_requests_get_openai_400_bodies(
    start: Start, http: aiohttp.ClientSession, body: object, param: str | None
) -> None:
    server = await start()
    status, payload, _ = await post(http, server, body)
    assert status == 400
    error = payload["error"]
    assert error.keys() == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if param is not None and param.startswith("input["):
        assert param in error["message"]
    assert server.stats.errors == {"400": 1}


async def test_openai_client_sees_bad_request_with_index(start: Start) -> None:
    server = await start()
    async with client(server) as c:
        with pytest.raises(openai.BadRequestError) as caught:
            await c.embeddings.create(model=MODEL, input=["a", "b", ""])
    assert caught.value.param == "input[2]"
    assert "input[2]" in caught.value.message


async def test_reject_texts_containing_names_the_index(
    start: Start, http: aiohttp.ClientSession
) -> None:
    server = await start(SimulatorConfig(base_ms=0, reject_texts_containing="POISON"))
    status, payload, _ = await post(
        http, server, {"model": "m", "input": ["fine", "ok", "x", "has POISON in it", "y"]}
    )
    assert status == 400
    assert payload["error"]["param"] == "input[3]"
    assert "input[3]" in payload["error"]["message"]
    status, _, _ = await post(http, server, {"model": "m", "input": ["fine", "ok"]})
    assert status == 200


# --------------------------------------------------------------------------- models


async def test_lists_models_in_openai_format(start: Start, http: aiohttp.ClientSession) -> None:
    server = await start()
    async with client(server) as c:
        listed = [model async for model in c.models.list()]
        one = await c.models.retrieve(MODEL)
        with pytest.raises(openai.NotFoundError) as caught:
            await c.models.retrieve("no-such-model")
    assert MODEL in [m.id for m in listed]
    assert {(m.object, m.owned_by) for m in listed} == {("model", "embedstream-simulator")}
    assert (one.id, one.object) == (MODEL, "model")
    assert caught.value.code == "model_not_found"
    async with http.get(f"{server.url}/models") as response:
        body = await response.json()
    assert response.status == 200
    assert body["object"] == "list"
    assert all(set(m) == {"id", "object", "created", "owned_by"} for m in body["data"])


async def test_models_need_the_key_when_one_is_set(start: Start) -> None:
    server = await start(SimulatorConfig(base_ms=0, auth_key="secret"))
    async with client(server, api_key="wrong") as c:
        with pytest.raises(openai.AuthenticationError):
            await c.models.list()
        with pytest.raises(openai.AuthenticationError):
            await c.models.retrieve(MODEL)
    async with client(server, api_key="secret") as c:
        assert MODEL in [m.id async for m in c.models.list()]


# --------------------------------------------------------------------------- faults


async def test_wrong_api_key_gets_401(start: Start) -> None:
    server = await start(SimulatorConfig(base_ms=0, auth_key="secret"))
    async with client(server, api_key="wrong") as c:
        with pytest.raises(openai.AuthenticationError) as caught:
            await c.embeddings.create(model=MODEL, input="x")
    assert caught.value.code == "invalid_api_key"
    async with client(server, api_key="secret") as c:
        result = await c.embeddings.create(model=MODEL, input="x")
    assert len(result.data) == 1
    assert server.stats.errors == {"401": 1}


async def test_rate_limit_window_toggled_via_admin(
    start: Start, http: aiohttp.ClientSession
) -> None:
    server = await start()
    await admin_faults(http, server, {"rate_limit_for_s": 60})
    status, payload, headers = await post(http, server, {"model": "m", "input": "x"})
    assert status == 429
    assert payload["error"]["type"] == "rate_limit_exceeded"
    assert 0 < float(headers["retry-after"]) <= 60
    assert 0 < int(headers["retry-after-ms"]) <= 60_000
    async with client(server) as c:
        with pytest.raises(openai.RateLimitError):
            await c.embeddings.create(model=MODEL, input="x")
    await admin_faults(http, server, {"rate_limit_for_s": 0})
    status, _, _ = await post(http, server, {"model": "m", "input": "x"})
    assert status == 200
    assert server.stats.rejected_429 == 2
    assert server.stats.errors == {"429": 2}


async def test_rate_limit_window_from_start(start: Start, http: aiohttp.ClientSession) -> None:
    server = await start(SimulatorConfig(base_ms=0, rate_limit_for_s=600))
    status, _, _ = await post(http, server, {"model": "m", "input": "x"})
    assert status == 429


async def test_token_bucket_rate_limit_with_fake_clock(
    start: Start, http: aiohttp.ClientSession
) -> None:
    now = [1000.0]
    server = await start(SimulatorConfig(base_ms=0, rate_limit_rps=1), clock=lambda: now[0])
    body = {"model": "m", "input": "x"}
    assert (await post(http, server, body))[0] == 200
    status, _, headers = await post(http, server, body)
    assert status == 429
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("1.000", "1000")
    now[0] += 1.0
    assert (await post(http, server, body))[0] == 200


async def test_announced_budgets_come_with_every_answer_and_are_enforced(
    start: Start, http: aiohttp.ClientSession
) -> None:
    now = [1000.0]
    config = SimulatorConfig(
        base_ms=0, rate_limit_rpm=120, rate_limit_tpm=600, rate_limit_burst_s=1
    )
    server = await start(config, clock=lambda: now[0])  # 2 requests and 10 tokens a second
    status, _, headers = await post(http, server, {"model": "m", "input": ["a b c", "d e"]})
    assert status == 200
    assert {k: v for k, v in headers.items() if k.startswith("x-ratelimit-")} == {
        "x-ratelimit-limit-requests": "120",
        "x-ratelimit-remaining-requests": "1",
        "x-ratelimit-reset-requests": "500ms",
        "x-ratelimit-limit-tokens": "600",
        "x-ratelimit-remaining-tokens": "5",
        "x-ratelimit-reset-tokens": "500ms",
    }
    status, _, headers = await post(http, server, {"model": "m", "input": "a b c d e f"})
    assert status == 429  # 6 tokens, 5 left: 0.1 s to go
    assert headers["retry-after-ms"] == "100"
    assert headers["x-ratelimit-remaining-tokens"] == "5"
    now[0] += 0.1
    assert (await post(http, server, {"model": "m", "input": "a b c d e f"}))[0] == 200
    assert server.stats.rejected_429 == 1


async def test_the_openai_client_reads_the_announced_budget(start: Start) -> None:
    server = await start(SimulatorConfig(base_ms=0, rate_limit_rpm=3000))
    async with client(server) as c:
        raw = await c.embeddings.with_raw_response.create(model=MODEL, input="x")
    assert raw.headers["x-ratelimit-limit-requests"] == "3000"
    assert raw.headers["x-ratelimit-remaining-requests"] == "2999"


async def test_error_rate_gives_500_and_can_be_switched_off(
    start: Start, http: aiohttp.ClientSession
) -> None:
    server = await start(SimulatorConfig(base_ms=0, error_rate=1.0))
    async with client(server) as c:
        with pytest.raises(openai.InternalServerError):
            await c.embeddings.create(model=MODEL, input="x")
    status, payload, _ = await post(http, server, {"model": "m", "input": "x"})
    assert status == 500
    assert payload["error"]["type"] == "server_error"
    server.set_faults(error_rate=0.0)
    assert (await post(http, server, {"model": "m", "input": "x"}))[0] == 200
    assert server.stats.errors == {"500": 2}


async def test_hang_uses_injected_sleep(start: Start, http: aiohttp.ClientSession) -> None:
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    config = SimulatorConfig(base_ms=7, hang_rate=1.0)
    server = await start(config, sleep=record_sleep)
    status, _, _ = await post(http, server, {"model": "m", "input": "x"})
    assert status == 200
    assert slept[0] == 3600.0
    assert 0.0 <= slept[1] <= 0.007  # the model's latency less the simulator's own work


async def test_the_simulators_own_work_is_part_of_the_latency(
    start: Start, http: aiohttp.ClientSession
) -> None:
    """Building the response counts against the modelled latency (eight big calls ending
    together were otherwise built one after another, each waiting for the others)."""
    slept: list[float] = []
    ticks = iter(range(10**6))

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    def clock() -> float:  # 2 ms pass between any two readings: building takes 2 ms
        return next(ticks) * 0.002

    server = await start(SimulatorConfig(base_ms=7), sleep=record_sleep, clock=clock)
    status, _, _ = await post(http, server, {"model": "m", "input": "x"})
    assert status == 200
    assert slept == [pytest.approx(0.005)]


async def test_stop_cancels_hung_calls(start: Start, http: aiohttp.ClientSession) -> None:
    server = await start(SimulatorConfig(base_ms=0, hang_rate=1.0, hang_s=3600))
    call = asyncio.create_task(post(http, server, {"model": "m", "input": "x"}))
    await wait_until(lambda: server.stats.calls == 1)
    async with asyncio.timeout(30):  # would take an hour if hung calls were awaited
        await server.stop()
    with pytest.raises(aiohttp.ClientError):
        await call


async def test_shuffle_returns_every_index_in_another_order(
    start: Start, http: aiohttp.ClientSession
) -> None:
    server = await start(SimulatorConfig(base_ms=0, shuffle_rate=1.0, seed=7))
    texts = [f"t{i}" for i in range(20)]
    status, payload, _ = await post(http, server, {"model": "m", "input": texts})
    assert status == 200
    indices = [item["index"] for item in payload["data"]]
    assert sorted(indices) == list(range(20))
    assert indices != list(range(20))
    for item in payload["data"]:
        assert item["embedding"] == expected_vector("m", texts[item["index"]], 256)


async def test_shuffle_is_reproducible_with_a_seed(
    start: Start, http: aiohttp.ClientSession
) -> None:
    orders = []
    for _ in range(2):
        server = await start(SimulatorConfig(base_ms=0, shuffle_rate=1.0, seed=11))
        _, payload, _ = await post(http, server, {"model": "m", "input": list("abcdefgh")})
        orders.append([item["index"] for item in payload["data"]])
    assert orders[0] == orders[1]


# --------------------------------------------------------------------------- capacity


async def test_capacity_queues_calls_beyond_the_limit(
    start: Start, http: aiohttp.ClientSession
) -> None:
    gate = asyncio.Event()

    async def gated_sleep(seconds: float) -> None:
        await gate.wait()

    server = await start(SimulatorConfig(capacity=3), sleep=gated_sleep)
    calls = [
        asyncio.create_task(post(http, server, {"model": "m", "input": f"t{i}"})) for i in range(10)
    ]
    await wait_until(lambda: server.stats.calls == 10 and server.stats.in_flight == 3)
    for _ in range(20):  # give queued calls every chance to (wrongly) get in
        await asyncio.sleep(0)
    assert server.stats.in_flight == 3
    gate.set()
    results = await asyncio.gather(*calls)
    assert [status for status, _, _ in results] == [200] * 10
    assert server.stats.peak_concurrency == 3
    assert server.stats.in_flight == 0


async def test_capacity_respected_with_real_latency(start: Start) -> None:
    server = await start(SimulatorConfig(base_ms=20, capacity=2))
    async with client(server) as c:
        results = await asyncio.gather(
            *(c.embeddings.create(model=MODEL, input=f"t{i}") for i in range(12))
        )
    assert len(results) == 12
    assert 1 <= server.stats.peak_concurrency <= 2


# --------------------------------------------------------------------------- control routes


async def test_stats_and_reset(start: Start, http: aiohttp.ClientSession) -> None:
    server = await start()
    await post(http, server, {"model": "m", "input": ["a b", "c"]})
    await post(http, server, {"model": "m", "input": "d e f"})
    await post(http, server, {"model": "m", "input": ""})
    stats = await get_json(http, f"{server.root_url}/stats")
    assert stats == {
        "calls": 3,
        "inputs": 3,
        "tokens": 6,
        "errors": {"400": 1},
        "peak_concurrency": 1,
        "in_flight": 0,
        "rejected_429": 0,
        "batches": 0,
        "batch_inputs": 0,
        "batch_tokens": 0,
        "received": 0,
        "peak_received": 1,
        "over_capacity_s": 0.0,
        "longest_over_capacity_s": 0.0,
    }
    async with http.post(f"{server.root_url}/admin/reset-stats") as response:
        assert response.status == 200
    stats = await get_json(http, f"{server.root_url}/stats")
    assert (stats["calls"], stats["inputs"], stats["errors"]) == (0, 0, {})


async def test_healthz(start: Start, http: aiohttp.ClientSession) -> None:
    server = await start()
    async with http.get(f"{server.root_url}/healthz") as response:
        assert response.status == 200


async def test_admin_faults_reads_and_updates_config(
    start: Start, http: aiohttp.ClientSession
) -> None:
    server = await start()
    config = await admin_faults(http, server, {"shuffle_rate": 0.5, "auth_key": "k"})
    assert (config["shuffle_rate"], config["auth_key"]) == (0.5, "k")
    assert server.config.shuffle_rate == 0.5
    assert await get_json(http, f"{server.root_url}/admin/faults") == config


@pytest.mark.parametrize(
    "body", [{"error_rate": 2}, {"no_such": 1}, {"capacity": 99}, [1], b"{bad"]
)
async def test_admin_faults_rejects_bad_changes(
    start: Start, http: aiohttp.ClientSession, body: object
) -> None:
    server = await start()
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    async with http.post(f"{server.root_url}/admin/faults", data=raw) as response:
        assert response.status == 400
        assert (await response.json())["error"]["type"] == "invalid_request_error"
    assert server.config == FAST


# --------------------------------------------------------------------------- CLI


def test_cli_defaults_match_config_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    ns = parser.parse_args([])
    assert (ns.host, ns.port) == ("127.0.0.1", 8700)
    assert config_from_args(ns) == SimulatorConfig()


def test_cli_options_reach_the_config() -> None:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    # fmt: off
    ns = parser.parse_args([
        "--port", "0", "--base-ms", "1", "--per-token-ms", "0.5", "--per-input-ms", "2",
        "--capacity", "4", "--dimensions", "32", "--rate-limit-rps", "10",
        "--error-rate", "0.1", "--hang-rate", "0.2", "--hang-s", "5", "--shuffle-rate", "0.3",
        "--reject-texts-containing", "BAD", "--auth-key", "k", "--seed", "9",
        "--rate-limit-rpm", "3000", "--rate-limit-tpm", "1e6", "--rate-limit-burst-s", "1",
    ])
    # fmt: on
    assert config_from_args(ns) == SimulatorConfig(
        base_ms=1,
        per_token_ms=0.5,
        per_input_ms=2,
        capacity=4,
        default_dimensions=32,
        rate_limit_rps=10,
        rate_limit_rpm=3000,
        rate_limit_tpm=1e6,
        rate_limit_burst_s=1,
        error_rate=0.1,
        hang_rate=0.2,
        hang_s=5,
        shuffle_rate=0.3,
        reject_texts_containing="BAD",
        auth_key="k",
        seed=9,
    )


async def test_serve_forever_serves_until_cancelled(
    http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="embedsim.server")
    task = asyncio.create_task(serve_forever(FAST, "127.0.0.1", 0))
    await wait_until(lambda: "listening on" in caplog.text)
    match = re.search(r"listening on (http://\S+)/v1", caplog.text)
    assert match is not None
    async with http.get(f"{match.group(1)}/healthz") as response:
        assert response.status == 200
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_flaky_texts_fail_exactly_fail_times_then_succeed(
    start: Start, http: aiohttp.ClientSession
) -> None:
    config = SimulatorConfig(
        base_ms=0, fail_texts_containing="FLAKY", fail_times=2, record_calls=True
    )
    server = await start(config)
    body = {"model": "m", "input": ["fine", "FLAKY one"]}
    statuses = [(await post(http, server, body))[0] for _ in range(4)]
    assert statuses == [500, 500, 200, 200]
    assert [c.status for c in server.calls] == statuses
    assert server.calls[0].inputs == ("fine", "FLAKY one")
    status, _, _ = await post(http, server, {"model": "m", "input": ["FLAKY two"]})
    assert status == 500  # counted per text, not per call


async def test_a_big_calls_own_work_runs_off_the_event_loop_and_answers_the_same(
    start: Start, http: aiohttp.ClientSession
) -> None:
    """A call of more than OFF_LOOP_INPUTS inputs is parsed and built by ``off_loop`` (a worker
    thread by default: on the loop, a 2,048-input call's own work held every other call's
    answer); a small call stays inline; both answer the vectors of their texts, in order."""
    from embedsim.server import OFF_LOOP_BODY_BYTES, OFF_LOOP_INPUTS

    offloaded: list[str] = []

    async def recording(function: Callable[..., Any], *args: Any) -> Any:
        offloaded.append(function.__name__)
        return await asyncio.to_thread(function, *args)

    server = await start(FAST, off_loop=recording)
    big = [f"text {i} " + "word " * 200 for i in range(OFF_LOOP_INPUTS + 1)]
    assert len(orjson.dumps(big)) > OFF_LOOP_BODY_BYTES
    for texts in (["one small call"], big):
        async with http.post(
            f"{server.url}/embeddings", json={"model": MODEL, "input": texts}
        ) as answer:
            assert answer.status == 200
            body = orjson.loads(await answer.read())
        assert [d["index"] for d in body["data"]] == list(range(len(texts)))
        assert [d["embedding"] for d in body["data"]] == [
            expected_vector(MODEL, t, FAST.default_dimensions) for t in texts
        ]
    assert offloaded == ["parse_request", "_encoded_answer"]  # the big call only
