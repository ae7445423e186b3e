"""The batching engine as a library, without Kafka: for asyncio services that embed per request.

    async with BatchingClient(base_url="http://localhost:8700/v1", model="m") as client:
        vector = await client.embed("hello")
        vectors = await client.embed(["a", "b"])

Concurrent callers are batched by the same policy, lanes and limits as the Kafka processor and
their batches go through the same batch-call path (:mod:`embedstream.engine.calls`): holds on
rate limits and outages, retries of transient failures with backoff, splitting of rejected
batches. Each caller gets its own vector, or its own exception, back (`engine/callers.py`,
which also looks texts up in the embedding cache before they are batched).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal, overload

from embedstream.core import configured
from embedstream.core.clock import Clock
from embedstream.core.lanes import BucketKey, Priority
from embedstream.core.limits import check_item
from embedstream.core.observer import EngineObserver
from embedstream.core.tokens import TokenCounter, estimate_tokens
from embedstream.engine.backend import EmbeddingBackend
from embedstream.engine.build import build_engine
from embedstream.engine.cache import EmbeddingCache, build_cache
from embedstream.engine.callers import CallerIntake, CallerRequest, Callers
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.errors import PermanentItemError, Reason, TransientError
from embedstream.settings import Settings, load_settings, validate
from embedstream.wire import Vector

__all__ = ["BatchingClient", "Vector"]

log = logging.getLogger(__name__)

Lane = Literal["high", "low"]
IN_PROCESS_ID = "in-process"  # what logs name a caller's text (texts are never logged)
EncodingFormat = Literal["float", "base64"]


class BatchingClient:
    """Batches concurrent `embed` calls. Settings default to :class:`Settings`' defaults;
    pass `settings=` or any setting by name (`max_wait_ms=20`, `max_attempts=3`, ...).
    `api_key` and `base_url` fall back to OPENAI_API_KEY and OPENAI_BASE_URL."""

    def __init__(
        self,
        backend: EmbeddingBackend | None = None,
        *,
        settings: Settings | None = None,
        token_counter: TokenCounter = estimate_tokens,
        observer: EngineObserver | None = None,
        embedding_cache: EmbeddingCache | None = None,
        clock: Clock = SYSTEM_CLOCK,
        **setting_values: Any,
    ) -> None:
        """`embedding_cache` replaces the one the `cache` settings would build (tests, or one
        cache shared by several clients)."""
        self.settings = _resolve(settings, setting_values)
        self._backend = backend or OpenAIEmbedder.from_settings(self.settings)
        self._limits = configured.provider_limits(self.settings)
        self._profile = configured.profile_label(self.settings)
        self._count_tokens = token_counter
        self._cache = embedding_cache or build_cache(self.settings, observer)
        self._callers = Callers()
        engine = build_engine(
            self.settings,
            self._backend,
            self._callers,
            clock=clock,
            observer=observer,
            cache=self._cache,
            keep=_still_awaited,
        )
        self._callers.attach(engine.batcher)
        self.governor = engine.governor
        self._batcher = engine.batcher
        self._caller = engine.caller
        self._intake = CallerIntake(engine.batcher, self._cache)
        self._runner: asyncio.Task[None] | None = None

    @property
    def model(self) -> str:
        """The model used when a call names none."""
        return self.settings.model

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

    async def close(self, timeout_s: float | None = None) -> None:
        """Send what is buffered and wait for every answer (retries included), then release
        the HTTP client. After `timeout_s`, callers still waiting get a TransientError."""
        if self._runner is not None:
            self._batcher.drain()
            try:
                await asyncio.wait_for(asyncio.shield(self._runner), timeout_s)
            except TimeoutError:
                self._intake.cancel_look_ups()
                self._caller.abandon_holds()
                self._callers.give_up_waiting()
                self._callers.abandoned(self._batcher.abandon())
                with contextlib.suppress(asyncio.CancelledError):
                    await self._runner
            self._runner = None
        await self._backend.close()
        if self._cache is not None:
            await self._cache.close()

    def submit(
        self,
        text: str,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        encoding_format: EncodingFormat | None = None,
        priority: Lane = "high",
        user: str | None = None,
        input_type: str | None = None,
        task: str | None = None,
    ) -> asyncio.Future[Vector]:
        """Queue one text; the future resolves to its vector. Raises at once on bad input
        (also for a `dimensions`, `user`, `input_type` or `task` the provider profile does
        not take)."""
        if self._runner is None:
            raise RuntimeError("BatchingClient not started: use `async with` or start()")
        tokens = self._count_tokens(text)
        encoding = encoding_format or self.settings.encoding_format
        parameters: tuple[str, ...] = ()
        if user is not None or input_type is not None or task is not None:
            fields = {"user": user, "input_type": input_type, "task": task}
            parameters = tuple(name for name, value in fields.items() if value is not None)
        problem = check_item(
            self._limits,
            text=text,
            tokens=tokens,
            encoding_format=encoding,
            dimensions=dimensions,
            parameters=parameters,
            profile_name=self._profile,
        )
        if problem is not None:
            raise PermanentItemError(problem.reason, problem.message)
        key = BucketKey(
            Priority.HIGH if priority == "high" else Priority.LOW,
            model or self.settings.model,
            encoding,
            dimensions,
            user,
            input_type,
            task,
        )
        future: asyncio.Future[Vector] = asyncio.get_running_loop().create_future()
        self._intake.submit(
            CallerRequest(id=IN_PROCESS_ID, text=text, tokens=tokens, key=key, future=future)
        )
        return future

    @overload
    async def embed(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self,
        text: str,
        *,
        model: str | None = ...,
        dimensions: int | None = ...,
        encoding_format: EncodingFormat | None = ...,
        priority: Lane | None = ...,
        timeout: float | None = ...,  # noqa: ASYNC109 (OpenAI SDK style)
        user: str | None = ...,
        input_type: str | None = ...,
        task: str | None = ...,
    ) -> Vector: ...

    @overload
    async def embed(
        self,
        text: Sequence[str],
        *,
        model: str | None = ...,
        dimensions: int | None = ...,
        encoding_format: EncodingFormat | None = ...,
        priority: Lane | None = ...,
        timeout: float | None = ...,  # noqa: ASYNC109 (OpenAI SDK style)
        user: str | None = ...,
        input_type: str | None = ...,
        task: str | None = ...,
    ) -> list[Vector]: ...

    async def embed(
        self,
        text: str | Sequence[str],
        *,
        model: str | None = None,
        dimensions: int | None = None,
        encoding_format: EncodingFormat | None = None,
        priority: Lane | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (per call, as the OpenAI SDK has it)
        user: str | None = None,
        input_type: str | None = None,
        task: str | None = None,
    ) -> Vector | list[Vector]:
        """The vector of one text (high priority by default), or of each text of a list (low
        priority by default), like the OpenAI SDK's `embeddings.create(input=...)`."""
        if isinstance(text, str):  # the hot path: one future, nothing else to set up
            future = self.submit(
                text,
                model=model,
                dimensions=dimensions,
                encoding_format=encoding_format,
                priority=priority or "high",
                user=user,
                input_type=input_type,
                task=task,
            )
            return await self._answer(future, timeout)
        lane: Lane = priority or "low"
        futures = [
            self.submit(
                t,
                model=model,
                dimensions=dimensions,
                encoding_format=encoding_format,
                priority=lane,
                user=user,
                input_type=input_type,
                task=task,
            )
            for t in text
        ]
        try:
            async with asyncio.timeout(timeout):
                # In order rather than gather(): no per-future callbacks, same total wait.
                return [await future for future in futures]
        except TimeoutError:
            raise TransientError(Reason.TIMEOUT, f"no vector within {timeout:g}s") from None
        finally:
            for future in futures:
                future.cancel()  # no-op for finished ones; a cancelled job is never sent

    async def _answer(self, future: asyncio.Future[Vector], within_s: float | None) -> Vector:
        try:
            if within_s is None:
                return await future
            return await asyncio.wait_for(future, within_s)
        except TimeoutError:
            raise TransientError(Reason.TIMEOUT, f"no vector within {within_s:g}s") from None
        except BaseException:
            future.cancel()  # the caller gave up: a cancelled job is never sent
            raise

    async def embed_many(self, texts: Sequence[str], *, priority: Lane = "low") -> list[Vector]:
        return await self.embed(list(texts), priority=priority)


def _resolve(settings: Settings | None, values: dict[str, Any]) -> Settings:
    if settings is None:
        # Like the OpenAI SDK, read only OPENAI_API_KEY / OPENAI_BASE_URL from the environment.
        env = {k: v for k, v in os.environ.items() if k in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
        return load_settings(env=env, overrides=values)
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(Settings)})
    if unknown:
        raise TypeError(f"BatchingClient got unknown settings: {', '.join(unknown)}")
    resolved = dataclasses.replace(settings, **values)
    validate(resolved)
    return resolved


def _still_awaited(request: CallerRequest) -> bool:
    """A caller that gave up (timeout, cancel) needs no call."""
    return not request.future.done()
