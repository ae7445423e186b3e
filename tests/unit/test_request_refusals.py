"""A provider's answer about one request (its model, its `dimensions`) is that request's answer:
given at once with the provider's status and message, never split input by input, never a
reason to count the provider unusable for anyone else, never sent again for a caller gone.

Found from outside (issue 42): a caller naming a model a vLLM server does not serve got a 504
after 10 s, then every caller got 503 for 30 s and /readyz said "provider unusable", and the
refused call went out again every 5 s after its caller left; `dimensions: 5000` on 50 inputs
was bisected in 43-70 calls into one 400 blaming `input[0]`, with 49 "Future exception was
never retrieved" tracebacks.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

import orjson
import pytest
from embedstream.engine.answers import classify_status
from embedstream.engine.backend import BatchCall
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    RequestRefused,
)
from embedstream.testing import RecordingBackend

from tests.unit.test_online_lane import gateway, post

CALL = BatchCall("my-model", ["a", "b"], "float", 64)


def openai_error(message: str, param: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": code}})  # fmt: skip


def vllm_error(message: str, status: int) -> bytes:
    return orjson.dumps({"object": "error", "message": message, "type": "BadRequestError",
                         "param": None, "code": status})  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "kind", "reason", "param"),
    [
        (404, vllm_error("The model `my-model` does not exist.", 404), RequestRefused,
         Reason.UNKNOWN_MODEL, "model"),
        (404, openai_error("The model `x` does not exist", "model", "model_not_found"),
         RequestRefused, Reason.UNKNOWN_MODEL, "model"),
        (404, b'{"detail": "Not Found"}', ProviderWideError, Reason.NOT_FOUND, None),  # the URL
        (404, b"<html>404</html>", ProviderWideError, Reason.NOT_FOUND, None),
        (400, openai_error("Invalid 'dimensions': expected 1..3072, got 5000.", "dimensions"),
         RequestRefused, Reason.REJECTED, "dimensions"),
        (400, vllm_error("Invalid 'dimensions': expected 1..3072, got 5000.", 400),
         RequestRefused, Reason.REJECTED, "dimensions"),
        (400, vllm_error("`encoding_format` must be 'float' or 'base64'", 400), RequestRefused,
         Reason.REJECTED, "encoding_format"),
        (400, openai_error("This model does not support specifying dimensions."),
         RequestRefused, Reason.UNSUPPORTED_DIMENSIONS, "dimensions"),
        (400, vllm_error('Model "m" does not support matryoshka representation', 400),
         RequestRefused, Reason.UNSUPPORTED_DIMENSIONS, "dimensions"),
        # About the inputs, or naming nothing: split to find the inputs at fault.
        (400, openai_error("Invalid 'input[1]': string must not be empty.", "input[1]"),
         PermanentItemError, Reason.REJECTED, None),
        (400, vllm_error("you requested 9000 tokens in the input for embedding generation",
                         400), PermanentItemError, Reason.REJECTED, None),
        (422, b'{"message": "batch size 50 > maximum allowed batch size 32", "code": 422}',
         PermanentItemError, Reason.REJECTED, None),
        (400, b"bad request", PermanentItemError, Reason.REJECTED, None),
    ],
)  # fmt: skip
def test_a_refusal_of_the_request_is_told_from_one_of_its_inputs(
    status: int, body: bytes, kind: type[EmbedStreamError], reason: str, param: str | None
) -> None:
    error = classify_status(status, f"Error code: {status}", {}, CALL, body)
    assert type(error) is kind
    assert error.reason == reason
    if isinstance(error, RequestRefused):
        assert error.param == param
        assert error.status == status
        assert (
            error.provider_message == orjson.loads(body).get("error", orjson.loads(body))["message"]
        )  # the provider's words, passed on


def refusing(
    model: str = "my-model", dimensions: int | None = None
) -> Callable[[BatchCall], EmbedStreamError | None]:
    """A vLLM-like provider: serves `model` only, and `dimensions` up to 3072."""

    def check(call: BatchCall) -> EmbedStreamError | None:
        if call.model != model:
            body = vllm_error(f"The model `{call.model}` does not exist.", 404)
            return classify_status(404, "Error code: 404", {}, call, body)
        if call.dimensions is not None and call.dimensions > 3072:
            text = f"Invalid 'dimensions': expected an integer in 1..3072, got {call.dimensions}."
            return classify_status(400, "Error code: 400", {}, call, vllm_error(text, 400))
        return None

    return check


async def test_a_model_the_provider_does_not_serve_is_that_callers_404_and_no_one_elses() -> None:
    backend = RecordingBackend(fail=refusing())
    async with gateway(backend, model="my-model", provider_profile="vllm") as (service, url):
        status, body, _ = await asyncio.wait_for(
            post(url, {"model": "text-embedding-ada-002", "input": "x"}), 5
        )
        ready = service.online._lane.ready
        others = await asyncio.gather(*(post(url, {"input": f"q{i}"}) for i in range(5)))
        refused_calls = [c for c in backend.calls if c.model != "my-model"]
    assert status == 404
    assert body["error"] == {
        "message": "The model `text-embedding-ada-002` does not exist.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found",
    }  # fmt: skip
    assert ready  # the provider is usable for everyone else
    assert [s for s, _, _ in others] == [200] * 5
    assert len(refused_calls) == 1  # answered once, never held nor sent again


async def test_a_field_the_provider_refuses_is_one_call_and_one_400_naming_it() -> None:
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    backend = RecordingBackend(fail=refusing())
    async with gateway(backend, model="my-model", max_concurrency=1) as (_, url):
        texts = [f"text {i}" for i in range(50)]
        status, body, _ = await post(url, {"input": texts, "dimensions": 5000})
        calls = len(backend.calls)
        again, _, _ = await post(url, {"input": texts[:3]})
    gc.collect()
    await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert status == 400
    assert body["error"]["param"] == "dimensions"
    assert (
        body["error"]["message"]
        == "Invalid 'dimensions': expected an integer in 1..3072, got 5000."
    )
    assert calls == 1  # not bisected input by input
    assert again == 200
    assert unhandled == []  # every future awaited or cancelled: no "never retrieved"


async def test_a_batch_mates_failure_is_never_an_unretrieved_exception() -> None:
    """One input rejected: the 400 names it, its batch-mates' futures are still seen."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: unhandled.append(context))

    def reject_all(call: BatchCall) -> EmbedStreamError | None:
        body = openai_error("Invalid 'input': rejected by policy", "input")
        return classify_status(400, "Error code: 400", {}, call, body)

    async with gateway(RecordingBackend(fail=reject_all), max_concurrency=1) as (_, url):
        status, body, _ = await post(url, {"input": ["a", "b", "c", "d"]})
    gc.collect()
    await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert status == 400 and body["error"]["param"] == "input[0]"
    assert unhandled == []
