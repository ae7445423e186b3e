"""The online lane over real HTTP on loopback, in front of an in-memory provider: OpenAI's
shapes, order across calls, every refusal with its status, deadlines and disconnects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from embedstream.app.gateway import Gateway
from embedstream.core.lanes import Priority
from embedstream.core.tokens import estimate_tokens
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import ConfigError, EmbedStreamError
from embedstream.settings import load_settings
from embedstream.testing import RecordingBackend, eventually, reject_texts_containing, vector_for


class HeldBackend(RecordingBackend):
    """Answers only once `release` is set (a provider stuck on a call)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def embed(self, call: BatchCall) -> BatchOutcome:
        self.calls.append(call)
        await self.release.wait()
        return BatchOutcome([vector_for(t) for t in call.texts], 2, 1, 0.0)


@asynccontextmanager
async def gateway(backend: Any, **values: Any) -> AsyncIterator[tuple[Gateway, str]]:
    settings = load_settings(env={}, overrides={"metrics_port": 0, **values})
    service = Gateway(settings, backend, port=0)
    started = asyncio.Event()
    task = asyncio.create_task(service.run(started))
    await started.wait()
    try:
        yield service, f"http://127.0.0.1:{service.online.port}"
    finally:
        service.stop()
        await task


async def post(
    url: str, body: object, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/embeddings", data=orjson.dumps(body), headers=headers) as answer,
    ):
        return answer.status, orjson.loads(await answer.read()), dict(answer.headers)


async def test_vectors_come_back_in_input_order_across_several_calls() -> None:
    backend = RecordingBackend()
    async with gateway(backend, max_batch_size=4) as (_, url):
        texts = [f"text {i}" for i in range(10)]
        status, body, _ = await post(url, {"input": texts})
    assert status == 200
    assert [d["embedding"] for d in body["data"]] == [vector_for(t) for t in texts]
    assert [d["index"] for d in body["data"]] == list(range(10))
    assert len(backend.calls) >= 3 and all(len(c.texts) <= 4 for c in backend.calls)
    assert body["model"] == "text-embedding-3-small"
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0


async def test_concurrent_callers_share_calls_and_a_shared_user_is_sent() -> None:
    backend = RecordingBackend(latency_s=0.01)
    async with gateway(backend, max_concurrency=1) as (_, url):
        answers = await asyncio.gather(
            *(post(url, {"input": f"q{i}", "user": "alice"}) for i in range(20))
        )
    assert {status for status, _, _ in answers} == {200}
    assert len(backend.calls) < 20  # batched together while the one slot was busy
    assert {c.user for c in backend.calls} == {"alice"}  # not in the key, but sent


async def test_callers_with_different_users_still_share_calls() -> None:
    backend = RecordingBackend(latency_s=0.01)
    async with gateway(backend, max_concurrency=1) as (_, url):
        await asyncio.gather(*(post(url, {"input": f"q{i}", "user": f"u{i}"}) for i in range(20)))
    assert any(len(c.texts) > 1 for c in backend.calls)
    assert all(c.user is None for c in backend.calls if len(c.texts) > 1)


async def test_token_ids_pass_through_where_the_preset_takes_them() -> None:
    backend = RecordingBackend()
    async with gateway(backend) as (_, url):
        status, body, _ = await post(url, {"input": [[5, 6, 7], "text"]})
    assert status == 200
    assert backend.calls[0].texts == [(5, 6, 7), "text"]
    assert body["data"][0]["embedding"] == vector_for((5, 6, 7))


async def test_token_ids_are_refused_naming_a_preset_that_takes_none() -> None:
    async with gateway(RecordingBackend(), provider_profile="ollama") as (_, url):
        status, body, _ = await post(url, {"input": ["text", [5, 6]]})
    assert status == 400
    assert body["error"]["param"] == "input[1]"
    assert "ollama" in body["error"]["message"]


@pytest.mark.parametrize(
    ("values", "body", "status", "param"),
    [
        ({}, {"input": ["ok", ""]}, 400, "input[1]"),  # empty
        ({"max_input_tokens": 10}, {"input": ["ok", "x" * 100]}, 400, "input[1]"),
        ({"oversize_policy": "truncate", "max_input_tokens": 10}, {"input": "x" * 100}, 400,
         "input[0]"),  # over max_input_tokens is a 400 whatever oversize_policy says
        ({}, {"input": ["a"] * 2049}, 400, "input"),
        ({"allowed_models": "m1,m2", "model": "m1"}, {"input": "a", "model": "m3"}, 404, "model"),
        ({"provider_profile": "dashscope"}, {"input": "a", "encoding_format": "base64"}, 400,
         "encoding_format"),
        ({"provider_profile": "ollama"}, {"input": "a", "user": "u"}, 400, "user"),
        ({"http_max_body_bytes": 1000}, {"input": "x" * 2000}, 413, None),
    ],
)  # fmt: skip
async def test_bad_requests_get_their_status_and_name_the_field(
    values: dict[str, Any], body: object, status: int, param: str | None
) -> None:
    backend = RecordingBackend()
    async with gateway(backend, **values) as (_, url):
        got, answer, _ = await post(url, body)
    assert got == status
    assert answer["error"]["param"] == param
    assert answer["error"]["message"]
    assert backend.calls == []  # nothing of a refused request reaches the provider


async def test_one_input_the_provider_rejects_is_named_and_the_others_are_cached() -> None:
    backend = RecordingBackend(fail=reject_texts_containing("poison"))
    async with gateway(backend, cache="memory", max_wait_ms=0) as (_, url):
        status, body, _ = await post(url, {"input": ["good a", "poison", "good b"]})
        assert status == 400 and body["error"]["param"] == "input[1]"
        sent = len(backend.calls)
        status, _, _ = await post(url, {"input": ["good a", "good b"]})
    assert status == 200
    assert len(backend.calls) == sent  # both answered from the cache


async def test_a_passing_deadline_answers_504_and_unsent_inputs_are_never_sent() -> None:
    backend = HeldBackend()
    async with gateway(backend, online_timeout_s=0.3, max_concurrency=1, max_batch_size=1) as (
        _,
        url,
    ):
        status, body, _ = await post(url, {"input": ["a", "b", "c"]})
        backend.release.set()
    assert status == 504 and body["error"]["code"] == "timeout"
    assert [list(c.texts) for c in backend.calls] == [["a"]]  # b and c were dropped


async def test_a_caller_that_disconnects_cancels_its_inputs() -> None:
    backend = HeldBackend()
    async with gateway(backend, max_concurrency=1, max_batch_size=1) as (service, url):
        request = asyncio.create_task(post(url, {"input": ["a", "b"]}))
        await eventually(lambda: len(backend.calls) == 1)
        request.cancel()  # the connection closes: aiohttp cancels the handler
        await eventually(lambda: service.metrics.registry.get_sample_value(
            "embedstream_online_requests_total", {"key": "anonymous", "status": "499"}
        ) == 1.0)  # fmt: skip
        backend.release.set()
        await eventually(lambda: service.metrics.registry.get_sample_value(
            "embedstream_in_flight_calls") in (None, 0.0))  # fmt: skip
    assert [list(c.texts) for c in backend.calls] == [["a"]]


async def test_a_lane_that_cannot_answer_in_time_says_so_at_once() -> None:
    backend = RecordingBackend()
    async with gateway(backend, online_timeout_s=5.0) as (service, url):
        service._engine.governor.hold(60.0)  # a 429's retry-after of a minute
        status, body, headers = await post(url, {"input": "a"})
    assert status == 429
    assert body["error"]["type"] == "rate_limit_error"
    assert 55 <= int(headers["Retry-After"]) <= 60
    assert backend.calls == []


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Basic sk-rag"}, 401),
        ({"Authorization": "Bearer sk-rag"}, 200),
    ],
)
async def test_callers_authenticate_with_a_key(headers: dict[str, str], status: int) -> None:
    async with gateway(RecordingBackend(), http_api_keys="rag:sk-rag,idx:sk-idx") as (_, url):
        got, body, _ = await post(url, {"input": "a"}, headers)
    assert got == status
    if status == 401:
        assert body["error"]["code"] == "invalid_api_key"
        assert "sk-rag" not in orjson.dumps(body).decode()


async def test_keys_rotate_when_their_file_changes(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("rag:sk-old\n")
    async with gateway(RecordingBackend(), http_api_keys_file=str(keys)) as (_, url):
        assert (await post(url, {"input": "a"}, {"Authorization": "Bearer sk-old"}))[0] == 200
        keys.write_text("rag:sk-new, other:sk-other\n")

        async def new_key_works() -> bool:
            answer = await post(url, {"input": "a"}, {"Authorization": "Bearer sk-new"})
            return answer[0] == 200

        await eventually(new_key_works, timeout_s=5.0, poll_s=0.2)
        assert (await post(url, {"input": "a"}, {"Authorization": "Bearer sk-old"}))[0] == 401


async def test_a_key_over_its_limits_gets_429_and_others_do_not() -> None:
    values = {
        "http_api_keys": "rag:sk-rag,idx:sk-idx",
        "http_key_limits": '{"idx": {"requests_per_s": 1}}',
    }
    async with gateway(RecordingBackend(), **values) as (service, url):
        idx, rag = {"Authorization": "Bearer sk-idx"}, {"Authorization": "Bearer sk-rag"}
        assert (await post(url, {"input": "a"}, idx))[0] == 200
        status, body, headers = await post(url, {"input": "a"}, idx)
        assert status == 429 and headers["Retry-After"] == "1"
        assert body["error"]["type"] == "rate_limit_error"
        assert (await post(url, {"input": "a"}, rag))[0] == 200
        sample = service.metrics.registry.get_sample_value
        assert sample("embedstream_online_requests_total", {"key": "idx", "status": "429"}) == 1


async def test_models_lists_the_allowed_models_and_the_sdk_reads_everything() -> None:
    import openai

    async with gateway(RecordingBackend(), allowed_models="m1,m2", model="m1") as (_, url):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        models = await client.models.list()
        answer = await client.embeddings.create(
            model="m2", input=["a", "b"], encoding_format="float"
        )
        with pytest.raises(openai.BadRequestError) as caught:
            await client.embeddings.create(model="m1", input=["a", ""])
        await client.close()
    assert [m.id for m in models.data] == ["m1", "m2"]
    assert [d.embedding for d in answer.data] == [vector_for("a"), vector_for("b")]
    assert answer.model == "m2"
    assert "input[1]" in str(caught.value)


async def test_stopping_refuses_new_requests_and_answers_those_in_flight() -> None:
    backend = HeldBackend()
    async with gateway(backend) as (service, url):
        first = asyncio.create_task(post(url, {"input": "a"}))
        await eventually(lambda: len(backend.calls) == 1)
        service.stop()
        await eventually(lambda: service.online._stopping)
        backend.release.set()
        status, body, _ = await first
    assert status == 200 and body["data"][0]["embedding"] == vector_for("a")


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"http_host": "0.0.0.0"}, "http_api_keys"),
        ({"http_host": "0.0.0.0", "http_api_keys": "a:b", "http_key_limits": '{"c": {}}'},
         "http_key_limits"),
        ({"http_ssl_certfile": "/nonexistent.pem"}, "http_ssl_keyfile"),
        ({"http_api_keys": "no-colon"}, "http_api_keys"),
        ({"http_api_keys": "a:k,b:k"}, "http_api_keys"),
    ],
)  # fmt: skip
def test_bad_online_settings_fail_at_start_naming_the_setting(
    values: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Gateway(load_settings(env={}, overrides=values), RecordingBackend())
    assert caught.value.setting == setting
    assert "k,b:k" not in str(caught.value)  # keys are never echoed


async def test_a_taken_port_is_one_line_naming_the_setting() -> None:
    async with gateway(RecordingBackend()) as (service, _):
        taken = service.online.port
        other = Gateway(load_settings(env={}, overrides={"metrics_port": 0}), RecordingBackend(),
                        port=taken)  # fmt: skip
        with pytest.raises(EmbedStreamError, match="http_port"):
            await other.run()


def _unused(*_: Callable[..., Any]) -> None:
    return None


async def test_blank_inputs_go_to_the_provider_as_it_embeds_them() -> None:
    """Only what the provider refuses (an empty string) is refused here: LlamaIndex sends " "
    for a blank chunk, and a 400 for it failed the caller's whole batch."""
    backend = RecordingBackend()
    async with gateway(backend) as (_, url):
        status, body, _ = await post(url, {"input": [" ", "\t\n", "text"]})
    assert status == 200
    assert [d["embedding"] for d in body["data"]] == [vector_for(t) for t in (" ", "\t\n", "text")]
    assert sorted(t for c in backend.calls for t in c.texts) == sorted([" ", "\t\n", "text"])


async def test_usage_is_the_providers_count_when_the_request_had_calls_of_its_own() -> None:
    """Found from outside: 3 for "hello" where the provider counted 1 (the lane's estimate)."""
    backend = RecordingBackend()  # counts a text's characters: "hello" is 5, our estimate 3
    async with gateway(backend, max_batch_size=2) as (_, url):
        _, alone, _ = await post(url, {"input": "hello"})
        _, several_calls, _ = await post(url, {"input": ["abc", "defg", "hijkl"]})
    assert alone["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    assert len(backend.calls) == 3  # the three inputs in two calls, both of this request only
    assert several_calls["usage"]["prompt_tokens"] == 3 + 4 + 5


async def test_usage_is_the_estimate_when_a_call_carried_other_requests_too() -> None:
    backend = HeldBackend()
    async with gateway(backend, max_concurrency=1) as (service, url):
        first = asyncio.create_task(post(url, {"input": "first"}))
        await eventually(lambda: len(backend.calls) == 1)  # the one slot is busy
        shared = [asyncio.create_task(post(url, {"input": t})) for t in ("abcdefgh", "ijklmnop")]
        batcher = service._engine.batcher
        await eventually(lambda: batcher.buffered_in(Priority.ONLINE) == 2)
        backend.release.set()
        answers = [await task for task in (first, *shared)]
    assert [list(c.texts) for c in backend.calls][1] == ["abcdefgh", "ijklmnop"]
    estimate = estimate_tokens("abcdefgh")
    assert [body["usage"]["prompt_tokens"] for _, body, _ in answers] == [1, estimate, estimate]


async def test_a_gate_closing_past_a_waiting_requests_deadline_answers_429_at_once() -> None:
    """A request already waiting when a 429 with a retry-after of a minute closes the gate
    cannot be answered within its 30 s: a 429 with that Retry-After within a gate check,
    never a 504 half a minute later, and its unsent inputs never go."""
    backend = HeldBackend()
    async with gateway(backend, online_timeout_s=30.0, max_concurrency=1, max_batch_size=1) as (
        service,
        url,
    ):
        request = asyncio.create_task(post(url, {"input": ["a", "b"]}))
        await eventually(lambda: len(backend.calls) == 1)  # "a" at the provider, "b" waiting
        service._engine.governor.hold(60.0)  # another call's 429: retry after a minute
        status, body, headers = await asyncio.wait_for(request, 2.0)
        backend.release.set()
    assert status == 429 and body["error"]["type"] == "rate_limit_error"
    assert 55 <= int(headers["Retry-After"]) <= 60
    assert [list(c.texts) for c in backend.calls] == [["a"]]
