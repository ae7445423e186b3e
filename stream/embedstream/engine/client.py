"""The batching engine as a library, without Kafka: for asyncio services that embed per request.

    async with BatchingClient(base_url="http://localhost:8700/v1", model="m") as client:
        vector = await client.embed("hello", priority="high")

Concurrent callers are batched by the same policy, lanes and limits as the Kafka processor;
each caller gets its own vector (or its own exception) back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from embedstream.core.dedup import unique_texts
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.core.tokens import TokenCounter, estimate_tokens
from embedstream.engine.batcher import Batcher
from embedstream.engine.embedder import BatchCall, EmbeddingBackend, OpenAIEmbedder
from embedstream.errors import SPLITTABLE_REASONS, EmbedStreamError, PermanentItemError, Reason

Vector = list[float] | str


@dataclass(slots=True)
class _Request:
    text: str
    future: asyncio.Future[Vector]


class BatchingClient:
    def __init__(
        self,
        backend: EmbeddingBackend | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str = "text-embedding-3-small",
        encoding_format: Literal["float", "base64"] = "float",
        max_batch_size: int = 256,
        max_batch_tokens: int = 100_000,
        max_input_tokens: int = 8_192,
        max_wait_ms: float = 20.0,
        scale_factor: float = 64.0,
        max_concurrency: int = 4,
        request_timeout_s: float = 30.0,
        token_counter: TokenCounter = estimate_tokens,
    ) -> None:
        self._backend = backend or OpenAIEmbedder(
            base_url=base_url, api_key=api_key, timeout_s=request_timeout_s
        )
        self._model = model
        self._encoding_format = encoding_format
        self._max_input_tokens = max_input_tokens
        self._count_tokens = token_counter
        limits = BatchLimits(max_batch_size, max_batch_tokens, max_wait_ms / 1000.0, scale_factor)
        self._batcher: Batcher[_Request] = Batcher(
            limits, self._dispatch, max_concurrency=max_concurrency
        )
        self._runner: asyncio.Task[None] | None = None
        self.calls = 0

    @property
    def model(self) -> str:
        """The model used when a call names none."""
        return self._model

    async def __aenter__(self) -> BatchingClient:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def start(self) -> None:
        if self._runner is None:
            self._runner = asyncio.create_task(self._batcher.run())

    async def close(self) -> None:
        """Send what is buffered, wait for in-flight calls, release the HTTP client."""
        if self._runner is not None:
            self._batcher.drain()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        await self._backend.close()

    def submit(
        self,
        text: str,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        encoding_format: Literal["float", "base64"] | None = None,
        priority: Literal["high", "low"] = "high",
    ) -> asyncio.Future[Vector]:
        """Queue one text; the future resolves to its vector. Raises at once on bad input."""
        if self._runner is None:
            raise RuntimeError("BatchingClient not started: use `async with` or start()")
        if not text or text.isspace():
            raise PermanentItemError(Reason.EMPTY_TEXT, "text is empty or only whitespace")
        tokens = self._count_tokens(text)
        if tokens > self._max_input_tokens:
            raise PermanentItemError(
                Reason.TOO_LONG, f"about {tokens} tokens, limit {self._max_input_tokens}"
            )
        key = BucketKey(
            Priority.HIGH if priority == "high" else Priority.LOW,
            model or self._model,
            encoding_format or self._encoding_format,
            dimensions,
        )
        future: asyncio.Future[Vector] = asyncio.get_running_loop().create_future()
        self._batcher.add(key, tokens, _Request(text, future))
        return future

    async def embed(
        self,
        text: str,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        encoding_format: Literal["float", "base64"] | None = None,
        priority: Literal["high", "low"] = "high",
    ) -> Vector:
        return await self.submit(
            text,
            model=model,
            dimensions=dimensions,
            encoding_format=encoding_format,
            priority=priority,
        )

    async def embed_many(
        self, texts: Sequence[str], *, priority: Literal["high", "low"] = "low"
    ) -> list[Vector]:
        futures = [self.submit(text, priority=priority) for text in texts]
        # Awaiting in order is cheaper than gather() (no per-future callbacks) and the batcher
        # runs in the background meanwhile, so the total wait is the same.
        try:
            return [await future for future in futures]
        finally:
            for future in futures:
                future.cancel()  # no-op for finished ones; drops the rest if we failed early

    async def _dispatch(
        self, key: BucketKey, batch: list[Pending[_Request]], reason: FlushReason
    ) -> None:
        del reason
        await self._call(key, [p.payload for p in batch])

    async def _call(self, key: BucketKey, requests: list[_Request]) -> None:
        distinct, mapping = unique_texts([r.text for r in requests])
        call = BatchCall(key.model, distinct, key.encoding_format, key.dimensions)
        self.calls += 1
        governor = self._batcher.governor
        try:
            outcome = await self._backend.embed(call)
        except EmbedStreamError as exc:
            governor.on_failure(exc)
            if len(requests) > 1 and exc.reason in SPLITTABLE_REASONS:
                # Find the bad input; its batch-mates still get their vectors.
                middle = len(requests) // 2
                await asyncio.gather(
                    self._call(key, requests[:middle]), self._call(key, requests[middle:])
                )
                return
            for request in requests:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        governor.on_success(outcome.latency_s, outcome.headers)
        for request, index in zip(requests, mapping, strict=True):
            if not request.future.done():  # the caller may have been cancelled
                request.future.set_result(outcome.vectors[index])
