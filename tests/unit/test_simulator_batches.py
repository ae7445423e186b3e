"""The simulator's Batch API (/v1/files, /v1/batches) as the openai SDK meets it: OpenAI's
shapes (checked with the SDK's own models, strictly), each state of a batch on an injected
wall clock, output and error files, failing lines, and OpenAI's limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from embedsim import SimulatorConfig, SimulatorServer, decode_base64, expected_vector
from openai.types import Batch, FileObject

MODEL = "text-embedding-3-small"
T0 = 1_750_000_000.0


class Wall:
    """The simulator's Unix clock, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def started(wall: Wall, **config: Any) -> SimulatorServer:
    server = SimulatorServer(SimulatorConfig(base_ms=0, **config), wall=wall)
    await server.start()
    return server


def client(server: SimulatorServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url, api_key="k", max_retries=0)


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def line(custom_id: str, text: str | list[str], model: str = MODEL, **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings",
            "body": {"model": model, "input": text, **body}}  # fmt: skip


async def submit(
    c: openai.AsyncOpenAI, lines: list[dict[str, Any]], metadata: dict[str, str] | None = None
) -> Batch:
    uploaded = await c.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    return await c.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h",
        metadata=metadata,
    )  # fmt: skip


async def raw(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def content(c: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    answer = await c.files.content(file_id)
    return [orjson.loads(row) for row in answer.content.splitlines()]


async def test_a_batch_from_upload_to_output_in_openais_shapes(
    wall: Wall, http: aiohttp.ClientSession
) -> None:
    server = await started(wall, batch_validating_s=2, batch_completion_s=10,
                           batch_finalizing_s=3)  # fmt: skip
    async with client(server) as c:
        texts = ["alpha", "beta gamma", "δέλτα"]
        lines = [line(f"r{i}", t, dimensions=8) for i, t in enumerate(texts)]
        lines[2]["body"]["encoding_format"] = "base64"
        uploaded = await c.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        assert (uploaded.purpose, uploaded.bytes, uploaded.filename) == (
            "batch",
            len(jsonl(lines)),
            "in.jsonl",
        )
        file_json = await raw(http, f"{server.url}/files/{uploaded.id}")
        FileObject.model_validate(file_json, strict=True)
        assert (await c.files.content(uploaded.id)).content == jsonl(lines)

        batch = await c.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h",
            metadata={"embedstream_job": "j-1"},
        )  # fmt: skip
        assert (batch.status, batch.created_at, batch.expires_at) == (
            "validating",
            int(T0),
            int(T0) + 86_400,
        )
        states = []
        for step in (1.0, 2.0, 5.0, 11.9, 12.0, 14.9, 15.0):
            wall.now = T0 + step
            seen = await raw(http, f"{server.url}/batches/{batch.id}")
            Batch.model_validate(seen, strict=True)
            states.append((seen["status"], seen["request_counts"]["completed"]))
        assert states == [
            ("validating", 0), ("in_progress", 0), ("in_progress", 0), ("in_progress", 2),
            ("finalizing", 3), ("finalizing", 3), ("completed", 3),
        ]  # fmt: skip
        done = await c.batches.retrieve(batch.id)
        assert (done.in_progress_at, done.finalizing_at, done.completed_at) == (
            int(T0) + 2,
            int(T0) + 12,
            int(T0) + 15,
        )
        assert done.error_file_id is None and done.metadata == {"embedstream_job": "j-1"}
        assert done.usage is not None and done.usage.input_tokens == 1 + 2 + 1
        assert done.model == MODEL
        output = {entry["custom_id"]: entry for entry in await content(c, done.output_file_id)}
        assert set(output) == {"r0", "r1", "r2"}
        for i, text in enumerate(texts):
            entry = output[f"r{i}"]
            assert entry["error"] is None and entry["id"].startswith("batch_req_")
            assert entry["response"]["status_code"] == 200
            [item] = entry["response"]["body"]["data"]
            vector = item["embedding"]
            if i == 2:
                vector = decode_base64(vector)
            assert vector == expected_vector(MODEL, text, 8)
        output_file = await c.files.retrieve(done.output_file_id or "")
        assert output_file.purpose == "batch_output"
    stats = await raw(http, f"{server.root_url}/stats")
    assert (stats["batches"], stats["batch_inputs"], stats["batch_tokens"]) == (1, 3, 4)
    assert stats["tokens"] == 0  # the sync counters are apart
    await server.stop()


async def test_list_shows_metadata_newest_first_and_pages(wall: Wall) -> None:
    server = await started(wall)
    async with client(server) as c:
        made = []
        for i in range(3):
            wall.now += 1
            made.append(await submit(c, [line("a", "x")], {"embedstream_job": f"job-{i}"}))
        page = await c.batches.list(limit=2)
        assert [b.metadata for b in page.data] == [{"embedstream_job": "job-2"},
                                                   {"embedstream_job": "job-1"}]  # fmt: skip
        assert page.has_more is True
        every = [b.id async for b in c.batches.list(limit=2)]  # the SDK follows `after`
        assert every == [b.id for b in reversed(made)]
    await server.stop()


async def test_cancel_keeps_what_was_done_and_says_the_rest_was_cancelled(wall: Wall) -> None:
    server = await started(wall, batch_completion_s=4, batch_cancelling_s=1)
    async with client(server) as c:
        batch = await submit(c, [line(f"r{i}", f"text {i}") for i in range(4)])
        wall.now = T0 + 2.5  # two of four lines done
        cancelling = await c.batches.cancel(batch.id)
        assert cancelling.status == "cancelling" and cancelling.cancelling_at == int(T0 + 2.5)
        wall.now = T0 + 3.5
        cancelled = await c.batches.retrieve(batch.id)
        assert cancelled.status == "cancelled"
        assert cancelled.request_counts is not None
        assert (cancelled.request_counts.completed, cancelled.request_counts.total) == (2, 4)
        done = [e["custom_id"] for e in await content(c, cancelled.output_file_id)]
        rest = await content(c, cancelled.error_file_id)
        assert done == ["r0", "r1"]
        assert [(e["custom_id"], e["error"]["code"], e["response"]) for e in rest] == [
            ("r2", "batch_cancelled", None), ("r3", "batch_cancelled", None)]  # fmt: skip
        with pytest.raises(openai.APIStatusError) as refused:
            await c.batches.cancel(batch.id)
        assert refused.value.status_code == 409
    await server.stop()


async def test_a_batch_past_its_window_expires_with_its_done_lines(wall: Wall) -> None:
    server = await started(wall, batch_completion_s=10, batch_window_s=5)
    async with client(server) as c:
        batch = await submit(c, [line(f"r{i}", f"text {i}") for i in range(10)])
        wall.now = T0 + 4.99
        assert (await c.batches.retrieve(batch.id)).status == "in_progress"
        wall.now = T0 + 6
        expired = await c.batches.retrieve(batch.id)
        assert (expired.status, expired.expired_at) == ("expired", int(T0 + 5))
        assert len(await content(c, expired.output_file_id)) == 5
        rest = await content(c, expired.error_file_id)
        assert {e["error"]["code"] for e in rest} == {"batch_expired"} and len(rest) == 5
    await server.stop()


async def test_failing_lines_go_to_the_error_file_with_the_embeddings_answer(wall: Wall) -> None:
    server = await started(wall, reject_texts_containing="POISON")
    async with client(server) as c:
        lines = [line("good", "fine"), line("bad", "has POISON"), line("long", "a " * 9000),
                 line("dims", "x", dimensions=99_999)]  # fmt: skip
        batch = await submit(c, lines)
        wall.now = T0 + 1
        done = await c.batches.retrieve(batch.id)
        assert done.status == "completed"
        assert done.request_counts is not None and done.request_counts.failed == 3
        assert [e["custom_id"] for e in await content(c, done.output_file_id)] == ["good"]
        errors = {e["custom_id"]: e["response"] for e in await content(c, done.error_file_id)}
        assert {k: (v["status_code"], v["body"]["error"]["code"]) for k, v in errors.items()} == {
            "bad": (400, "input_rejected"), "long": (400, "context_length_exceeded"),
            "dims": (400, "invalid_value")}  # fmt: skip
    await server.stop()


async def test_line_error_rate_fails_lines_with_500s(wall: Wall) -> None:
    server = await started(wall, batch_line_error_rate=1.0)
    async with client(server) as c:
        done_at = await submit(c, [line("a", "x"), line("b", "y")])
        wall.now = T0 + 1
        done = await c.batches.retrieve(done_at.id)
        assert done.status == "completed" and done.output_file_id is None
        codes = {e["response"]["status_code"] for e in await content(c, done.error_file_id)}
        assert codes == {500}
    await server.stop()


BAD_FILES: list[tuple[str, bytes, str, int | None]] = [
    ("empty", b"\n", "empty_file", None),
    ("not json", jsonl([line("a", "x")]) + b"{oops\n", "invalid_json_line", 2),
    ("duplicate id", jsonl([line("a", "x"), line("a", "y")]), "duplicate_custom_id", 2),
    ("two models", jsonl([line("a", "x"), line("b", "y", model="other")]), "model_mismatch", 2),
    ("wrong url", jsonl([{**line("a", "x"), "url": "/v1/chat/completions"}]), "url_mismatch", 1),
    ("too many inputs", jsonl([line("a", ["x", "y"]), line("b", ["z", "w"])]), "too_many_tasks",
     None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("content_", "code", "at_line"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES]
)
async def test_a_bad_file_fails_the_batch_at_validation(
    wall: Wall, content_: bytes, code: str, at_line: int | None
) -> None:
    server = await started(wall, batch_validating_s=1, batch_max_requests=3)
    async with client(server) as c:
        uploaded = await c.files.create(file=("in.jsonl", content_), purpose="batch")
        batch = await c.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                       completion_window="24h")  # fmt: skip
        wall.now = T0 + 1
        failed = await c.batches.retrieve(batch.id)
        assert (failed.status, failed.failed_at) == ("failed", int(T0 + 1))
        assert failed.errors is not None and failed.errors.data
        assert (failed.errors.data[0].code, failed.errors.data[0].line) == (code, at_line)
    await server.stop()


async def test_the_enqueued_token_limit_fails_a_batch_until_others_finish(wall: Wall) -> None:
    server = await started(wall, batch_enqueued_tokens=10, batch_completion_s=5)
    async with client(server) as c:
        first = await submit(c, [line("a", "one two three four five six")])  # 6 tokens
        second = await submit(c, [line("b", "seven eight nine ten eleven")])  # 5: over 10
        other_model = await submit(c, [line("c", "a b c d e", model="other")])
        refused = await c.batches.retrieve(second.id)
        assert refused.status == "failed" and refused.errors and refused.errors.data
        error = refused.errors.data[0]
        assert error.code == "token_limit_exceeded" and error.line is None
        assert error.message is not None and "Limit: 10 enqueued tokens" in error.message
        assert (await c.batches.retrieve(other_model.id)).status == "in_progress"
        wall.now = T0 + 5  # the first is done: its tokens are no longer enqueued
        assert (await c.batches.retrieve(first.id)).status == "completed"
        again = await submit(c, [line("b", "seven eight nine ten eleven")])
        assert (await c.batches.retrieve(again.id)).status == "in_progress"
    await server.stop()


async def test_requests_openai_refuses_at_once(wall: Wall) -> None:
    server = await started(wall, batch_max_bytes=300)
    async with client(server) as c:
        small = await c.files.create(file=("in.jsonl", jsonl([line("a", "x")])), purpose="batch")
        big = await c.files.create(file=("big.jsonl", jsonl([line("a", "x" * 400)])),
                                   purpose="batch")  # fmt: skip
        other = await c.files.create(file=("notes.txt", b"hello"), purpose="user_data")
        cases: list[tuple[dict[str, Any], str]] = [
            ({"input_file_id": big.id}, "File is too large."),
            ({"input_file_id": small.id, "endpoint": "/v1/chat/completions"}, "endpoint"),
            ({"input_file_id": small.id, "completion_window": "1h"}, "completion_window"),
            ({"input_file_id": "file-nope"}, "Cannot find file"),
            ({"input_file_id": other.id}, "purpose 'batch'"),
            ({"input_file_id": small.id, "metadata": {"k": "v" * 513}}, "metadata"),
        ]
        for changes, said in cases:
            body: dict[str, Any] = {"endpoint": "/v1/embeddings", "completion_window": "24h",
                                    **changes}  # fmt: skip
            with pytest.raises(openai.BadRequestError) as refused:
                await c.batches.create(**body)
            assert said in str(refused.value), (changes, str(refused.value))
        with pytest.raises(openai.BadRequestError, match=r"Must be \.jsonl"):
            await c.files.create(file=("in.txt", b"{}"), purpose="batch")
        with pytest.raises(openai.NotFoundError):
            await c.batches.retrieve("batch_nope")
        with pytest.raises(openai.NotFoundError):
            await c.files.retrieve("file-nope")
        deleted = await c.files.delete(small.id)
        assert deleted.deleted is True
        with pytest.raises(openai.NotFoundError):
            await c.files.content(small.id)
    await server.stop()


async def test_the_key_is_required_and_other_flavors_have_no_batch_api(wall: Wall) -> None:
    server = await started(wall, auth_key="secret")
    async with client(server) as c:  # key "k"
        with pytest.raises(openai.AuthenticationError):
            await c.batches.list()
    await server.stop()
    tei = await started(wall, flavor="tei")
    async with client(tei) as c:
        with pytest.raises(openai.NotFoundError):
            await c.files.create(file=("in.jsonl", b"{}\n"), purpose="batch")
    await tei.stop()


async def test_azure_flavor_serves_batches_under_its_deployment_style_paths(wall: Wall) -> None:
    server = await started(wall, flavor="azure", auth_key="az")
    azure = openai.AsyncAzureOpenAI(azure_endpoint=server.root_url, api_key="az",
                                    api_version="2024-10-21", max_retries=0)  # fmt: skip
    async with azure as c:
        uploaded = await c.files.create(file=("in.jsonl", jsonl([line("a", "x")])), purpose="batch")
        batch = await c.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                       completion_window="24h")  # fmt: skip
        wall.now = T0 + 1
        done = await c.batches.retrieve(batch.id)
        assert done.status == "completed"
        assert [e["custom_id"] for e in await content(c, done.output_file_id)] == ["a"]
    await server.stop()
