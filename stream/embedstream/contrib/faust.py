"""Embed the values of a faust stream through the adaptive batching engine.

For teams already on faust-streaming: every request event goes through the same policy, lanes,
limits and dedup as the Kafka processor (via
:class:`~embedstream.engine.client.BatchingClient`), without the pitfalls of ``stream.take()``:
no flush timer counted from the last flush, and no acking a whole buffer whether or not it
failed. One :class:`EmbedOutcome` comes out per event, in input order, and a faust event is
acked only after its own outcome has been handled::

    import faust
    from embedstream.contrib.faust import embed_events
    from embedstream.engine.client import BatchingClient

    app = faust.App("embedder", broker="kafka://localhost:9092", value_serializer="raw")
    requests_topic = app.topic("embed.requests")
    results_topic = app.topic("embed.results", value_serializer="raw")
    client = BatchingClient(base_url="http://localhost:8700/v1", model="text-embedding-3-small")

    @app.agent(requests_topic)
    async def embed(stream):
        async with client:
            async for outcome in embed_events(stream, client):
                if outcome.result is not None:
                    await results_topic.send(
                        key=outcome.request_id.encode(), value=outcome.result.encode()
                    )
                else:
                    ...  # outcome.reason / outcome.error: dead-letter or log it

Events are read ahead of the outcomes (at most ``max_pending`` unfinished), so a faust stream is
switched to manual acks for the duration and each event is acked when the agent asks for the
outcome after its own: a crash before that redelivers it (at-least-once). Event values may be
bytes, str (JSON) or a dict (faust's ``json`` serializer); a malformed one yields an outcome with
``reason`` set and the stream goes on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from embedstream.core.tokens import estimate_tokens
from embedstream.engine.client import BatchingClient, Vector
from embedstream.errors import EmbedStreamError, InvalidEvent, PermanentItemError, Reason
from embedstream.wire import EmbedRequest, EmbedResult, decode_request

__all__ = ["EmbedOutcome", "embed_events"]


@dataclass(frozen=True, slots=True)
class EmbedOutcome:
    """What became of one event: a ``result``, or an ``error`` message with its ``reason`` code.

    ``request_id`` is None only when the event was too malformed to name one.
    """

    request_id: str | None
    result: EmbedResult | None = None
    error: str | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None


@dataclass(slots=True)
class _Entry:
    """One event read from the stream, in input order, with its outcome (now or later)."""

    event: Any  # the faust Event to ack afterwards, or None
    request: EmbedRequest | None = None
    future: asyncio.Future[Vector] | None = None
    outcome: EmbedOutcome | None = None
    submitted_at: float = 0.0
    finished_at: float = field(default=0.0)

    def finish(self, _: object) -> None:
        self.finished_at = time.monotonic()


@dataclass(frozen=True, slots=True)
class _StreamFailed:
    error: BaseException


_END = object()


async def embed_events(
    stream: AsyncIterable[Any],
    client: BatchingClient,
    *,
    max_pending: int = 1000,
    priority: Literal["high", "low"] = "high",
) -> AsyncIterator[EmbedOutcome]:
    """Yield one outcome per event of ``stream``, in input order; ``client`` must be started.

    At most ``max_pending`` events are read but not yet handed back (and, for a faust stream,
    not yet acked): reading pauses while that many are outstanding, so memory stays bounded.
    An error raised by the stream itself propagates after the outcomes of the events before it.
    """
    if max_pending < 1:
        raise ValueError("max_pending must be at least 1")
    slots = asyncio.Semaphore(max_pending)
    entries: asyncio.Queue[_Entry | _StreamFailed | object] = asyncio.Queue()
    acks = _FaustAcks.attach(stream)

    async def read() -> None:
        try:
            iterator = aiter(stream)
            while True:
                await slots.acquire()
                try:
                    value = await anext(iterator)
                except StopAsyncIteration:
                    break
                entry = _Entry(acks.current_event() if acks else None)
                _start(entry, value, client, priority)
                entries.put_nowait(entry)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the consumer, in order
            entries.put_nowait(_StreamFailed(exc))
            return
        entries.put_nowait(_END)

    reader = asyncio.create_task(read(), name="embed_events.read")
    try:
        while True:
            item = await entries.get()
            if item is _END:
                break
            if isinstance(item, _StreamFailed):
                raise item.error
            assert isinstance(item, _Entry)
            yield await _outcome(item, client)
            # The agent has handled this outcome and asks for the next one: safe to ack.
            if acks is not None and item.event is not None:
                await acks.ack(item.event)
            slots.release()
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        while not entries.empty():  # abandoned: nothing is acked, the batcher may drop them
            left = entries.get_nowait()
            if isinstance(left, _Entry) and left.future is not None:
                left.future.cancel()
        if acks is not None:
            acks.restore()


def _start(
    entry: _Entry, value: Any, client: BatchingClient, priority: Literal["high", "low"]
) -> None:
    """Decode and submit one event; bad input becomes an outcome right away, never an error."""
    try:
        request = decode_request(_as_bytes(value))
    except InvalidEvent as exc:
        entry.outcome = EmbedOutcome(_salvage_id(value), None, exc.message, exc.reason)
        return
    entry.request = request
    if request.deadline_ms is not None and time.time() * 1000 > request.deadline_ms:
        entry.outcome = EmbedOutcome(
            request.id, None, "deadline passed before sending", "deadline_exceeded"
        )
        return
    try:
        entry.future = client.submit(
            request.text,
            model=request.model,
            dimensions=request.dimensions,
            encoding_format=_encoding_format(request.encoding_format),
            priority=priority,
        )
    except EmbedStreamError as exc:  # empty or too long for the client's limits
        entry.outcome = EmbedOutcome(request.id, None, exc.message, exc.reason)
        return
    entry.submitted_at = time.monotonic()
    entry.future.add_done_callback(entry.finish)


async def _outcome(entry: _Entry, client: BatchingClient) -> EmbedOutcome:
    if entry.outcome is not None:
        return entry.outcome
    request, future = entry.request, entry.future
    assert request is not None and future is not None
    try:
        vector = await future
    except EmbedStreamError as exc:
        return EmbedOutcome(request.id, None, exc.message, exc.reason)
    # The done-callback is scheduled, not called, when the future resolves: it may not have run.
    finished_at = entry.finished_at or time.monotonic()
    try:
        dimensions = _dimensions(vector)
    except ValueError as exc:
        error = PermanentItemError(Reason.MALFORMED_RESPONSE, f"cannot read the vector: {exc}")
        return EmbedOutcome(request.id, None, error.message, error.reason)
    result = EmbedResult(
        id=request.id,
        # BatchingClient keeps its default model private; it is what the batch was sent with.
        model=request.model or client.model,
        embedding=vector,
        dimensions=dimensions,
        tokens=estimate_tokens(request.text),  # per-item usage is not reported: the estimate
        metadata=request.metadata,
        attempts=1,
        latency_ms=(finished_at - entry.submitted_at) * 1000.0,
    )
    return EmbedOutcome(request.id, result)


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, Mapping):
        try:
            return orjson.dumps(dict(value))
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise InvalidEvent(
                Reason.INVALID_JSON, f"value is not JSON-serializable: {exc}"
            ) from None
    raise InvalidEvent(
        Reason.NOT_AN_OBJECT, f"expected bytes, str or a mapping, got {type(value).__name__}"
    )


def _salvage_id(value: Any) -> str | None:
    """The event's id, if it has a usable one despite being invalid (to key its error)."""
    doc: Any = value
    if isinstance(value, bytes | bytearray | memoryview | str):
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    if isinstance(doc, Mapping):
        found = doc.get("id")
        if isinstance(found, str) and found:
            return found
    return None


def _encoding_format(value: str | None) -> Literal["float", "base64"] | None:
    if value == "float":
        return "float"
    if value == "base64":
        return "base64"
    return None


def _dimensions(vector: Vector) -> int:
    if isinstance(vector, str):  # base64 of little-endian float32
        return len(base64.b64decode(vector, validate=True)) // 4
    return len(vector)


class _FaustAcks:
    """Manual acks for a faust ``Stream``: acked per event once its outcome has been handled.

    A faust stream acks an event when iteration moves past it; reading ahead would then ack
    events whose outcomes do not exist yet. Like ``take()``, turn auto-acks off meanwhile.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._enable_acks: bool = stream.enable_acks
        stream.enable_acks = False

    @classmethod
    def attach(cls, stream: object) -> _FaustAcks | None:
        if all(hasattr(stream, name) for name in ("enable_acks", "current_event", "ack")):
            return cls(stream)
        return None

    def current_event(self) -> Any:
        return self._stream.current_event

    async def ack(self, event: Any) -> None:
        await self._stream.ack(event)

    def restore(self) -> None:
        self._stream.enable_acks = self._enable_acks
