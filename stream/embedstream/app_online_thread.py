"""The online lane on a thread and event loop of its own (``online_thread``), in a processor.

On the processor's event loop an online request waits for the Kafka lanes' turns at every
step (read, batched, sent, answered): while a backlog drains, each turn is the work of a poll
or a call of hundreds of items, and the request's tail is the sum of those waits. Here the
lane is a `serve` gateway (`app_serve.Gateway`: its own listener, batcher, provider
connections and in-process cache) on a thread whose loop holds nothing else; the interpreter
switches to it within its switch interval, whatever the processor's loop is doing.

The budget stays the processor's: the lane's engine has the slots the processor reserves for
it (``ONLINE_LANE.reserved_slots``), and its governor echoes every item seen, call started or
ended and token spent to the processor's governor (`LoopEcho`, one call posted to the
processor's loop each), which counts them in its in-flight total, its reservations and
``online_target_ms``, and its RPM/TPM buckets: the Kafka lanes wait for what the online lane
spends. The provider's 429 pauses hold both engines: the lane's failures are echoed too, and
the lane's governor holds its calls while the processor's gate is closed. The lane's own calls
are never held by the RPM/TPM buckets (they are counted, a loop turn later), and the
processor's adaptive limit decides from the Kafka lanes' answers and every failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterable

from embedstream.app_serve import Gateway
from embedstream.core.configured import ONLINE_LANE
from embedstream.core.governor import Governor
from embedstream.core.lanes import Priority
from embedstream.core.tracing import CallSpan, RecordHeaders, RequestSpan, Tracer
from embedstream.errors import EmbedStreamError
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings

log = logging.getLogger(__name__)

SAW_EVERY_S = 0.1  # the lane's activity, echoed at most this often (active for 1 s after)
THREAD_NAME = "embedstream-online"


class LoopEcho:
    """A governor echo that posts each event to the processor's loop, where its governor
    lives (a governor is not thread-safe: it is only ever touched from its own loop)."""

    def __init__(
        self,
        target: Governor,
        post: Callable[[Callable[[], None]], object],
        clock: Callable[[], float],
    ) -> None:
        """``post``: runs a function on the target's loop (``loop.call_soon_threadsafe``);
        ``clock``: this thread's monotonic seconds, for the pace of the activity echoes."""
        self._target = target
        self._post = post
        self._clock = clock
        self._saw_at: float | None = None

    def saw(self, lane: Priority) -> None:
        now = self._clock()
        if self._saw_at is not None and now - self._saw_at < SAW_EVERY_S:
            return
        self._saw_at = now
        self._post(functools.partial(self._target.saw, lane))

    def started(self, lane: Priority) -> None:
        self._saw_at = None  # a call counts as activity at once
        self._post(functools.partial(self._started_there, lane))

    def finished(self, lane: Priority, oldest_s: float | None) -> None:
        self._post(functools.partial(self._target.finished, lane, oldest_s))

    def reserved(self, tokens: int) -> None:
        self._post(functools.partial(self._reserved_there, tokens))

    def failed(self, error: EmbedStreamError) -> None:
        self._post(functools.partial(self._target.on_failure, error))

    def held_for(self) -> float:
        # A read across threads of one float the processor's loop sets: at worst a moment
        # stale, never torn (the interpreter's lock); the 429's pause holds both engines.
        return self._target.gate.blocked_for(self._clock())

    def _started_there(self, lane: Priority) -> None:
        self._target.saw(lane)
        self._target.started(lane)

    def _reserved_there(self, tokens: int) -> None:
        self._target.reserve(tokens)  # its delay is for the Kafka lanes' next calls


def online_thread_settings(settings: Settings) -> Settings:
    """The lane's engine: the slots the processor keeps for it, no buckets of its own (the
    processor's count its tokens), no ops port (the processor's serves its metrics)."""
    slots = max(1, min(ONLINE_LANE.reserved_slots, settings.max_concurrency - 1))
    return dataclasses.replace(
        settings, max_concurrency=slots, rate_limit_rpm=0.0, rate_limit_tpm=0.0, metrics_port=0
    )


class KeptOpenTracer:
    """The processor's tracer, which the processor closes (not the lane's engine)."""

    def __init__(self, inner: Tracer) -> None:
        self._inner = inner

    def request(
        self, headers: RecordHeaders | None, topic: str, partition: int, offset: int
    ) -> RequestSpan:
        return self._inner.request(headers, topic, partition, offset)

    def online(self, traceparent: str | None, key: str) -> RequestSpan:
        return self._inner.online(traceparent, key)

    def call(
        self, model: str, spans: Iterable[RequestSpan], *, size: int, reason: str, attempt: int
    ) -> CallSpan:
        return self._inner.call(model, spans, size=size, reason=reason, attempt=attempt)

    def close(self) -> None:
        return None


class OnlineThread:
    """The online lane of a processor, served on a thread of its own: started, told to stop
    accepting and stopped from the processor's loop, as `OnlineServer` is."""

    def __init__(self, settings: Settings, governor: Governor, metrics: Metrics, tracer: Tracer):
        self._settings = online_thread_settings(settings)
        self._governor = governor
        self._metrics = metrics
        self._tracer = KeptOpenTracer(tracer)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: Callable[[], None] | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        """Listening on ``port`` (0: a free one) once this returns; the lane's start failure
        (the port taken, a bad TLS file) is raised here."""
        main = asyncio.get_running_loop()
        echo = LoopEcho(self._governor, main.call_soon_threadsafe, main.time)
        settings = dataclasses.replace(self._settings, http_host=host)
        self._thread = threading.Thread(
            target=self._run, args=(settings, port, echo), name=THREAD_NAME, daemon=True
        )
        self._thread.start()
        await asyncio.to_thread(self._ready.wait)
        if self._failure is not None:
            raise self._failure

    async def stop_accepting(self) -> None:
        """Refuse new requests; the ones in flight are answered (within drain_timeout_s).
        Once: a second `Gateway.stop` would cut that drain short."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            self._stop = None
            with contextlib.suppress(RuntimeError):  # its loop already ended
                loop.call_soon_threadsafe(stop)

    async def stop(self) -> None:
        await self.stop_accepting()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    def _run(self, settings: Settings, port: int, echo: LoopEcho) -> None:
        try:
            asyncio.run(self._serve(settings, port, echo))
        except BaseException as exc:
            if not self._ready.is_set():
                self._failure = exc
            else:
                log.exception("the online lane's thread stopped on an error")
        finally:
            self._ready.set()

    async def _serve(self, settings: Settings, port: int, echo: LoopEcho) -> None:
        gateway = Gateway(
            settings, metrics=self._metrics, port=port, tracer=self._tracer, governor_echo=echo
        )
        self._loop, self._stop = asyncio.get_running_loop(), gateway.stop
        started = asyncio.Event()
        running = asyncio.create_task(gateway.run(started))
        listening = asyncio.create_task(started.wait())
        await asyncio.wait({running, listening}, return_when=asyncio.FIRST_COMPLETED)
        if running.done():
            listening.cancel()
            running.result()  # its start failed: say why
            return
        self.port = gateway.online.port
        self._ready.set()
        await running
