"""The online lane's requests, HTTP aside: one OpenAI embeddings request checked, judged
against its deadline, queued in the top lane of the engine and answered in input order.

Every way a request can fail maps to OpenAI's statuses here: a bad field or input is a 400
naming it (``input[i]``), an unknown model a 404, a key over its limits or a lane that cannot
answer in time a 429 with Retry-After, at once (also when a 429's retry-after met while it
waited outlasts its deadline); a provider failing beyond the retries a 503, a deadline passed
a 504. The provider's refusal of the request itself (a model it does not serve, a field it
refuses: `RequestRefused`) is passed on with its status and message.
Inputs share calls only with other online inputs (the lane has buckets of its own), the cache
and the provider budget with every lane; `usage` is the provider's count when the request's
inputs had calls of their own (`RequestUsage`), else the estimate.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from embedstream.core import configured
from embedstream.core.clock import Clock
from embedstream.core.costmodel import CostModels, cost_key
from embedstream.core.governor import Governor
from embedstream.core.keylimits import KeyLimits, retry_after
from embedstream.core.lanes import BucketKey, Priority
from embedstream.core.limits import check_item
from embedstream.core.shedding import LaneLoad, judge
from embedstream.core.tokens import TokenCounter
from embedstream.core.tracing import NULL_TRACER, RequestSpan, Tracer
from embedstream.engine.callers import CallerIntake, CallerRequest, RequestUsage
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    Reason,
    RequestRefused,
    TransientError,
)
from embedstream.settings import Settings, key_limits
from embedstream.wire import Vector
from embedstream.wire.openai import (
    ApiProblem,
    EmbeddingsRequest,
    Input,
    bad_request,
    embeddings_response,
)

log = logging.getLogger(__name__)

# How often a waiting request looks at the provider's gate: a 429 met by any call while it
# waits, with a retry-after past its deadline, is its answer within this long.
GATE_CHECK_S = 0.25


class OnlineObserver(Protocol):
    """What the lane reports (`ops.online_metrics.OnlineMetrics` is one)."""

    def declare_keys(self, names: list[str]) -> None: ...

    def count_request(self, key: str, status: int) -> None: ...

    def count_tokens(self, key: str, tokens: int) -> None: ...

    def observe_request(self, seconds: float) -> None: ...


class NullOnlineObserver:
    def declare_keys(self, names: list[str]) -> None:
        return None

    def count_request(self, key: str, status: int) -> None:
        return None

    def count_tokens(self, key: str, tokens: int) -> None:
        return None

    def observe_request(self, seconds: float) -> None:
        return None


class LaneBuffer(Protocol):
    """What the lane reads of the batcher: how many of its items wait for a call."""

    def buffered_in(self, priority: Priority) -> int: ...


@dataclass(frozen=True, slots=True)
class _Item:
    value: Input
    tokens: int


class OnlineLane:
    def __init__(
        self,
        settings: Settings,
        intake: CallerIntake,
        governor: Governor,
        buffer: LaneBuffer,
        cost: CostModels,
        *,
        clock: Clock,
        token_counter: TokenCounter,
        observer: OnlineObserver | None = None,
        tracer: Tracer = NULL_TRACER,
    ) -> None:
        self._settings = settings
        self._intake = intake
        self._governor = governor
        self._buffer = buffer
        self._cost = cost
        self._clock = clock
        self._count_tokens = token_counter
        self._observer = observer or NullOnlineObserver()
        self._tracer = tracer
        self._limits = configured.provider_limits(settings)
        self._batch_limits = configured.batch_limits(settings)
        self._profile = configured.profile_label(settings)
        self._key_limits = KeyLimits(key_limits(settings.http_key_limits))
        self._allowed = settings.allowed_model_set
        self._waiting: set[asyncio.Future[Vector]] = set()  # every caller's pending vectors

    @property
    def models(self) -> list[str]:
        """The models callers may name: allowed_models, or the default model."""
        return sorted(self._allowed) if self._allowed else [self._settings.model]

    @property
    def ready(self) -> bool:
        """Whether the lane can answer now (the provider is usable)."""
        return self._governor.provider_usable

    async def embed(
        self, request: EmbeddingsRequest, caller: str, traceparent: str | None = None
    ) -> bytes:
        """The 200 body for ``request`` from ``caller`` (a key's name); ApiProblem else. Its
        span continues the caller's W3C ``traceparent``; the provider calls link to it."""
        started = self._clock.monotonic()
        status = 200
        span = self._tracer.online(traceparent, caller)
        try:
            body, tokens = await self._embed(request, caller, span)
            self._observer.count_tokens(caller, tokens)
            return body
        except ApiProblem as problem:
            status = problem.status
            raise
        except asyncio.CancelledError:
            status = 499  # the caller went away (nginx's code for it)
            raise
        finally:
            span.end(str(status))
            self._observer.count_request(caller, status)
            self._observer.observe_request(self._clock.monotonic() - started)

    def fail_waiting(self) -> None:
        """Stopping: callers still waiting get a 503 now instead of their deadline's 504."""
        for future in list(self._waiting):
            if not future.done():
                future.set_exception(
                    TransientError(Reason.TIMEOUT, "embedstream stopped before answering")
                )

    async def _embed(
        self, request: EmbeddingsRequest, caller: str, span: RequestSpan
    ) -> tuple[bytes, int]:
        model = request.model or self._settings.model
        if self._allowed and model not in self._allowed:
            raise ApiProblem(
                404,
                f"The model `{model}` does not exist or is not served here; GET /v1/models "
                "lists the ones that are.",
                param="model",
                code="model_not_found",
            )
        encoding = request.encoding_format or "float"
        self._check_fields(encoding, request)
        items = [self._item(index, value) for index, value in enumerate(request.inputs)]
        tokens = sum(item.tokens for item in items)
        now = self._clock.monotonic()
        wait = self._key_limits.admit(caller, len(items), now)
        if wait > 0:
            raise ApiProblem(
                429,
                f"key {caller!r} is over its limits (http_key_limits); try again shortly",
                error_type="rate_limit_error",
                code="rate_limit_exceeded",
                retry_after_s=retry_after(wait),
            )
        key = BucketKey(Priority.ONLINE, model, encoding, request.dimensions)
        deadline_s = self._settings.online_timeout_s
        shed = judge(self._load(), len(items), tokens, self._cost.cost(cost_key(key)), deadline_s)
        if shed is not None:
            raise ApiProblem(
                shed.status,
                shed.message,
                error_type="rate_limit_error" if shed.status == 429 else "server_error",
                code="overloaded" if shed.status == 429 else "provider_unavailable",
                retry_after_s=shed.retry_after_s,
            )
        usage = RequestUsage()
        vectors = await self._queue_and_wait(
            key, items, caller, request.user, deadline_s, span, usage
        )
        # The provider's count when the request's inputs had calls of their own; else ours.
        tokens = usage.provider_count(len(items)) or tokens
        return embeddings_response(vectors, model, tokens), tokens

    def _check_fields(self, encoding: str, request: EmbeddingsRequest) -> None:
        """The request's own fields, checked once (a problem names the field)."""
        parameters = ("user",) if request.user is not None else ()
        problem = check_item(
            self._limits, text="x", tokens=1, encoding_format=encoding,
            dimensions=request.dimensions, parameters=parameters, profile_name=self._profile,
        )  # fmt: skip
        if problem is not None:
            field = {
                Reason.UNSUPPORTED_ENCODING_FORMAT: "encoding_format",
                Reason.UNSUPPORTED_DIMENSIONS: "dimensions",
            }.get(Reason(problem.reason), "user")
            raise bad_request(problem.message, field, problem.reason)

    def _item(self, index: int, value: Input) -> _Item:
        param = f"input[{index}]"
        if isinstance(value, tuple):
            if not self._limits.token_ids:
                raise bad_request(
                    f"Invalid '{param}': provider profile {self._profile} takes no token-id "
                    "inputs; send the text instead",
                    param,
                    "unsupported_input",
                )
            tokens = len(value)
            text = "ids"
        else:
            tokens = self._count_tokens(value)
            text = value
        # Over max_input_tokens is a 400 here whatever oversize_policy says: a caller waiting
        # for its vector wants to know, not to get the vector of a text cut short.
        problem = check_item(
            self._limits, text=text, tokens=tokens, encoding_format=self._limits.wire_format,
            blank_ok=True,
        )  # fmt: skip
        if problem is not None:
            raise bad_request(f"Invalid '{param}': {problem.message}", param, problem.reason)
        return _Item(value, tokens)

    def _load(self) -> LaneLoad:
        governor = self._governor
        return LaneLoad(
            queued_items=self._buffer.buffered_in(Priority.ONLINE),
            in_flight_calls=governor.lane_in_flight(Priority.ONLINE),
            slots=governor.lane_slots(Priority.ONLINE),
            max_items=self._batch_limits.max_items,
            blocked_s=governor.blocked_for(),
            provider_usable=governor.provider_usable,
            max_queued_items=self._settings.buffered_items_limit,
        )

    async def _queue_and_wait(
        self,
        key: BucketKey,
        items: list[_Item],
        caller: str,
        user: str | None,
        deadline_s: float,
        span: RequestSpan,
        usage: RequestUsage,
    ) -> list[Vector]:
        loop = asyncio.get_running_loop()
        deadline_ms = self._clock.wall_ms() + int(deadline_s * 1000)
        futures: list[asyncio.Future[Vector]] = []
        for item in items:
            future: asyncio.Future[Vector] = loop.create_future()
            ids = item.value if isinstance(item.value, tuple) else None
            text = item.value if isinstance(item.value, str) else ""
            self._intake.submit(
                CallerRequest(
                    id=f"online:{caller}", text=text, token_ids=ids, tokens=item.tokens,
                    key=key, future=future, deadline_ms=deadline_ms, user=user, span=span,
                    usage=usage,
                )
            )  # fmt: skip
            futures.append(future)
        self._waiting.update(futures)
        settled = False
        answers = asyncio.ensure_future(_answers(futures))
        try:
            async with asyncio.timeout(deadline_s):
                vectors = await self._answers_or_gate(answers, loop.time() + deadline_s)
            settled = True
            return vectors
        except TimeoutError:
            raise ApiProblem(
                504,
                f"no answer within online_timeout_s ({deadline_s:g}s)",
                error_type="server_error",
                code="timeout",
            ) from None
        except ApiProblem as problem:
            # One input can never be embedded: its batch-mates still finish (and are cached).
            settled = problem.status == 400
            raise
        finally:
            answers.cancel()
            self._waiting.difference_update(futures)
            for future in futures:
                if not settled:  # the caller is gone or out of time: unsent inputs never go
                    future.cancel()
                future.add_done_callback(_retrieved)  # a batch-mate's failure is not news

    async def _answers_or_gate(
        self, answers: asyncio.Future[list[Vector]], deadline: float
    ) -> list[Vector]:
        """The request's vectors; or, once the provider's gate or pace holds every call past
        the request's deadline (a 429's retry-after met while it waited), a 429 with that
        Retry-After now, rather than a 504 when the deadline passes."""
        loop = asyncio.get_running_loop()
        while True:
            done, _ = await asyncio.wait({answers}, timeout=GATE_CHECK_S)
            if done:
                return answers.result()
            blocked = self._governor.blocked_for()
            if blocked > deadline - loop.time():
                retry = retry_after(blocked)
                raise ApiProblem(
                    429,
                    f"the provider's rate limit holds every call for {blocked:.0f}s, past this "
                    f"request's deadline (online_timeout_s); try again in {retry}s",
                    error_type="rate_limit_error",
                    code="overloaded",
                    retry_after_s=retry,
                )


async def _answers(futures: list[asyncio.Future[Vector]]) -> list[Vector]:
    return [await _answer(index, future) for index, future in enumerate(futures)]


def _retrieved(future: asyncio.Future[Vector]) -> None:
    """Mark an unawaited future's outcome as seen: the request was answered without it."""
    if not future.cancelled():
        future.exception()


async def _answer(index: int, future: asyncio.Future[Vector]) -> Vector:
    try:
        return await future
    except RequestRefused as exc:  # about the request, not this input: the provider's words
        raise ApiProblem(
            exc.status if 400 <= exc.status < 500 else 400, exc.provider_message,
            param=exc.param, code=exc.code or exc.reason,
        ) from None  # fmt: skip
    except PermanentItemError as exc:
        param = f"input[{index}]"
        raise bad_request(f"Invalid '{param}': {exc.message}", param, exc.reason) from None
    except EmbedStreamError as exc:
        if exc.reason == Reason.DEADLINE_EXCEEDED:
            raise ApiProblem(
                504, "the deadline passed before the input was sent", error_type="server_error",
                code="timeout",
            ) from None  # fmt: skip
        raise ApiProblem(
            503,
            f"the embedding provider failed ({exc.reason}): {exc.message}",
            error_type="server_error",
            code="provider_error",
            retry_after_s=1,
        ) from None
