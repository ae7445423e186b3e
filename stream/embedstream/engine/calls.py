"""THE batch-call path: one batch in, one outcome per job out.

The Kafka processor and the in-process :class:`~embedstream.engine.client.BatchingClient`
both send every batch through :class:`BatchCaller`, so they share every rule:

- a job whose deadline has passed is dead-lettered without a call;
- identical texts are sent once and the vector fanned out: in a batch, and with an embedding
  cache across calls too (looked up again at the cut, `engine/shared_texts.py`, and stored);
- a batch the provider rejects as a whole (400, timeout, malformed response) is split in halves
  until the bad jobs are isolated, so one bad job never fails its batch-mates; so is a batch
  failing with a server error (500, 502, 503, 504) a second time while other calls succeed (a
  job of it failed before, or is on its last attempt), and a job is dead-lettered for a server
  error only once it failed alone. A split's calls spend no attempts: they are part of the
  one its batch was sent for. An input the provider failed alone is sent alone next time;
- failures everyone shares spend no attempts: a rate limit holds the batch until
  `retry-after`, a refused key or unknown model holds it with backoff, and so does an
  outage-like failure (connection, timeout, 5xx) while no other call succeeds. Only failures
  the provider's other calls do not share count as attempts, so an outage dead-letters nothing.
  Whether they share it is judged by the answers of the calls in flight: a batch is sent
  again without spending an attempt only as a hold's probe (after a 5xx, half of it:
  `engine/held_batches.py`). A hold closes the gate for everyone only once the provider looks
  down (`core/outage.py`); a held batch sends only the jobs still wanted (a caller that left
  is never sent for); while the provider is down, `engine/probe.py` asks it too;
- a refusal of the request rather than of an input (`RequestRefused`: a model the provider
  does not serve, a field it refuses) is never split: one call, every job the same answer.
  Callers hear it at once; Kafka work of a model the provider does not serve waits, with only
  that model's other items (`core/model_pauses.py`);
- a transient failure is retried after a backoff, up to `max_attempts`; then, or for a
  permanent failure, the job is dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Generic

from embedstream.core.backoff import Backoff
from embedstream.core.budget import ProviderBudget
from embedstream.core.costmodel import CostModels, cost_key
from embedstream.core.dedup import unique_texts
from embedstream.core.governor import OUTAGE_REASONS
from embedstream.core.lanes import BucketKey, Pending
from embedstream.core.observer import EngineObserver, NullObserver
from embedstream.core.policy import FlushReason
from embedstream.core.tokens import apportion
from embedstream.core.tracing import NULL_TRACER, Tracer
from embedstream.engine.backend import BatchCall, BatchOutcome, EmbeddingBackend
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.engine.evidence import FailingInputs, ServiceEvidence
from embedstream.engine.held_batches import Holds, joined, probe_piece, still_wanted
from embedstream.engine.jobs import Embedded, J, Outcomes
from embedstream.engine.shared_texts import NO_SHARING, SharedTexts, TextSharing
from embedstream.errors import (
    SERVER_ERROR_REASONS,
    SPLITTABLE_REASONS,
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    RequestRefused,
    TransientError,
)

log = logging.getLogger(__name__)

# An outage-like failure right after a success may still be this batch's own fault: the first
# failure of a job counts as an attempt if the provider served a call this recently.
RECENT_SUCCESS_MS = 1000


def _shared_user(batch: Sequence[Pending[J]]) -> str | None:
    """The `user` of online callers when every input of the call has the same one."""
    first = batch[0].payload.user
    if first is None or any(p.payload.user != first for p in batch):
        return None
    return first


_tokens, _job, _tuple_new = attrgetter("tokens"), attrgetter("payload"), tuple.__new__


class BatchCaller(Generic[J]):
    def __init__(
        self,
        backend: EmbeddingBackend,
        outcomes: Outcomes[J],
        budget: ProviderBudget,
        *,
        max_attempts: int,
        backoff: Backoff,
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
        observer: EngineObserver | None = None,
        cost: CostModels | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        texts: SharedTexts[J] | None = None,
        tracer: Tracer = NULL_TRACER,
        keep: Callable[[J], bool] | None = None,
    ) -> None:
        """`keep`: whether a job is still wanted (a caller may have gone): a held batch
        sends only those again."""
        self._backend = backend
        self._keep = keep
        self._outcomes = outcomes
        self._budget = budget
        self._governor = budget.plan  # what the budget looks like here, for holds
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._rng = rng or random.Random()
        self._holds = Holds(budget, backoff, self._rng, monotonic)
        self._clock_ms = clock_ms
        self._observer = observer or NullObserver()
        self._cost = cost  # learns L(b) from each successful call (spreading decisions)
        self._monotonic = monotonic
        self._texts: TextSharing[J] = texts or NO_SHARING  # with a cache: each text paid once
        self._tracer = tracer  # one client span per call, linked to its requests' spans
        self._traced = tracer is not NULL_TRACER
        self._evidence = ServiceEvidence(clock_ms)  # whether the provider serves others meanwhile
        self._failing = FailingInputs()  # inputs the provider failed alone (server errors)
        self.probe_key: BucketKey | None = None  # the last call's shape served: what probes send
        # Puts jobs back in the batcher (build_engine): a paused model's batches beyond the
        # one that asks the provider again wait there, not in a call slot each.
        self.requeue: Callable[[BucketKey, Sequence[Pending[J]]], None] | None = None

    def abandon_holds(self) -> None:
        """Stop waiting out rate limits and outages: held batches end with `abandoned`."""
        self._holds.abandon()
        self._evidence.stop()  # a verdict waiting for answers stops waiting too
        self._texts.abandon()

    def paused(self, key: BucketKey) -> bool:
        """Whether the batcher keeps a bucket's items (`engine/held_batches.py`)."""
        return self._holds.paused(key)

    async def probe(self, call: BatchCall) -> BatchOutcome:
        """One call outside any batch (`engine/probe.py`), counted as evidence of service."""
        return await self._evidence.call(self._embed(call), self._clock_ms())

    async def dispatch(
        self, key: BucketKey, batch: Sequence[Pending[J]], reason: FlushReason
    ) -> None:
        """Send one batch the batcher cut (the Batcher's dispatch callback)."""
        now = self._clock_ms()
        live: list[Pending[J]] = []
        for pending in batch:
            job = pending.payload
            if job.deadline_ms is not None and now > job.deadline_ms:
                expired = PermanentItemError(
                    Reason.DEADLINE_EXCEEDED, "deadline passed before sending"
                )
                await self._dead_letter(job, expired)
            else:
                live.append(pending)
        sending = await self._texts.to_send(key, live)  # the others: answered without a call
        live = sending.jobs
        for pending in live:
            pending.payload.attempts += 1
        failing = self._failing
        alone = [p for p in live if p.payload.input in failing] if failing else []
        try:
            if alone and len(live) > 1:  # without batch-mates, whom they would fail too
                others = [p for p in live if p.payload.input not in failing]
                calls = [self._call(key, [p], reason) for p in alone]
                await asyncio.gather(*calls, *([self._call(key, others, reason)] if others else []))
            elif live:
                await self._call(key, live, reason)
        finally:
            self._texts.ended(sending, abandoned=self._holds.abandoned)

    async def _call(
        self,
        key: BucketKey,
        batch: Sequence[Pending[J]],
        reason: str,
        split_from_ms: int | None = None,
    ) -> None:
        """`split_from_ms`: the batch is a part of a split to isolate a bad job, begun when
        the call of the whole was sent then."""
        held_back = 0  # consecutive shared failures of this batch
        waiting: list[list[Pending[J]]] = []  # held pieces, sent after a probe answers
        while True:
            inputs = [j.text if j.token_ids is None else j.token_ids for j in map(_job, batch)]
            distinct, mapping = unique_texts(inputs)  # (inputs: Job.input, without its calls)
            call = BatchCall.for_bucket(key, distinct, user=_shared_user(batch))
            # (The attempt is the tracer's only: a pass over the batch, not made untraced.)
            attempt = max(p.payload.attempts for p in batch) if self._traced else 0
            span = self._tracer.call(
                key.model, (p.payload.span for p in batch), size=len(batch), reason=reason,
                attempt=attempt,
            )  # fmt: skip
            started = time.perf_counter()
            sent_ms = self._clock_ms()
            try:
                outcome = await self._evidence.call(self._embed(call), sent_ms)
            except EmbedStreamError as exc:
                span.end(error=exc.reason)
                self._observer.observe_call(time.perf_counter() - started, ok=False)
                self._observer.observe_error(type(exc).__name__, exc.reason)
                self._budget.failed(exc)
                if not isinstance(exc, ProviderWideError | PermanentItemError | TransientError):
                    raise
                verdict = await self._verdict(batch, exc, split_from_ms or sent_ms, split_from_ms)
                if verdict is None:
                    self._outcomes.abandoned([p.payload for p in joined([batch, *waiting])])
                    return
                counted, held = verdict
                if counted:
                    await self._failed(key, counted, exc, split_from_ms or sent_ms, split_from_ms)
                if not held:
                    if not waiting:
                        return
                    # The provider answers about inputs again: the rest at once.
                    batch, waiting, held_back, reason = joined(waiting), [], 0, "held"
                    continue
                held_back += 1
                every = joined([held, *waiting])
                if self.requeue is not None and self._holds.asked_by_another(exc, key, held_back):
                    for pending in every:  # no attempt spent: they wait in the batcher
                        pending.payload.attempts -= 1
                    self.requeue(key, every)
                    return
                if not await self._holds.wait(exc, held_back, len(every), key.model):
                    self._outcomes.abandoned([p.payload for p in every])
                    return
                batch, waiting = probe_piece(held, waiting, exc)
                if self._keep is not None:  # never sent again for callers that are gone
                    batch, waiting = still_wanted(batch, waiting, self._keep)
                    if not batch:
                        return
                reason = "held"  # the batch (or a probe of it) again, after a hold
                continue
            span.end(input_tokens=outcome.total_tokens)
            tokens = sum(map(_tokens, batch))
            if self._cost is not None:
                self._cost.observe(
                    cost_key(key), tokens, len(distinct), outcome.latency_s, self._monotonic()
                )
            self._observer.observe_call(outcome.latency_s, ok=True)
            self._budget.succeeded(outcome.latency_s, outcome.headers)
            self._budget.counted(tokens, outcome.total_tokens)  # the pace's calibration
            self.probe_key = key
            self._holds.served(key.model)
            await self._succeeded(key, batch, mapping, outcome)
            await self._texts.store(key, distinct, outcome.vectors)
            if not waiting:
                return
            batch, waiting, held_back, reason = joined(waiting), [], 0, "held"  # the rest

    async def _embed(self, call: BatchCall) -> BatchOutcome:
        try:
            return await self._backend.embed(call)
        except EmbedStreamError:
            raise
        except Exception as exc:
            # A bug (ours or a backend's) fails the call like any other failure: retried,
            # split, finally dead-lettered with a reason. Escaping, it left the batch's items
            # unfinished for ever: callers waiting, their partitions' commits stuck.
            log.exception("unexpected error from the embedding backend")
            raise TransientError(
                Reason.INTERNAL_ERROR,
                f"{type(exc).__name__} raised by the embedding backend (see the processor log)",
            ) from exc

    async def _verdict(
        self,
        batch: Sequence[Pending[J]],
        exc: EmbedStreamError,
        sent_ms: int,
        split_from_ms: int | None,
    ) -> tuple[list[Pending[J]], list[Pending[J]]] | None:
        """The jobs a failure counts against (an attempt each), and those it says nothing
        about (held, no attempt spent); None if holds were abandoned meanwhile.

        Rate limits and refusals of everyone say nothing about a job. An outage-like failure
        (connection, timeout, 5xx) counts once the provider is seen serving someone since the
        job first failed (for a first failure, within the last RECENT_SUCCESS_MS). While calls
        are in flight, their answers decide: sending the batch again on a timer before they
        came made calls that spent no attempt (under load, 4-5 calls of a failing text for 3
        attempts). With nothing in flight, or the provider down, the job is held.

        A batch to split (`_to_split`) needs more: an answer since its call (a part of a
        split: since the whole's) was sent, `sent_ms`. Then the provider serves others now,
        not just a second ago: one going down is not sent a split's calls. Until then the
        batch is held.
        """
        if isinstance(exc, ProviderWideError) or exc.reason == Reason.RATE_LIMITED:
            return [], list(batch)
        if exc.reason == Reason.UNKNOWN_MODEL:  # callers hear it now, Kafka work waits
            waits = [self._outcomes.waits_for_model(p.payload) for p in batch]
            return [p for p, w in zip(batch, waits, strict=True) if not w], [
                p for p, w in zip(batch, waits, strict=True) if w
            ]
        if not (exc.retriable and exc.reason in OUTAGE_REASONS):
            return list(batch), []
        now = self._clock_ms()
        since = [self._evidence_since(p.payload, now) for p in batch]
        evidence = self._evidence
        to_split = self._to_split(batch, exc, split_from_ms is not None)

        def fresh() -> bool:
            return not to_split or evidence.answered_since(sent_ms)

        def told() -> bool:
            return fresh() and all(map(evidence.served_after, since))

        if not await evidence.wait_for_answers(told, lambda: self._governor.provider_down):
            return None
        if not fresh():
            return [], list(batch)
        served = [evidence.served_after(s) for s in since]
        counted = [p for p, yes in zip(batch, served, strict=True) if yes]
        held = [p for p, yes in zip(batch, served, strict=True) if not yes]
        return counted, held

    def _evidence_since(self, job: J, now_ms: int) -> int:
        """A call sent after this time and answered shows the provider serving others."""
        if job.first_failure_ms is not None:
            return job.first_failure_ms
        return now_ms - RECENT_SUCCESS_MS

    async def _failed(
        self,
        key: BucketKey,
        batch: Sequence[Pending[J]],
        exc: EmbedStreamError,
        sent_ms: int,
        split_from_ms: int | None,
    ) -> None:
        if (
            len(batch) > 1
            and not isinstance(exc, RequestRefused)
            and (
                exc.reason in SPLITTABLE_REASONS
                or self._to_split(batch, exc, split_from_ms is not None)
            )
        ):
            middle = len(batch) // 2
            halves = (batch[:middle], batch[middle:])
            await asyncio.gather(*(self._call(key, half, "split", sent_ms) for half in halves))
            return
        if len(batch) == 1 and exc.reason in SERVER_ERROR_REASONS:
            self._failing.failed_alone(batch[0].payload.input)
        # One line a failed call, not one an item (a call of hundreds filled the log at INFO).
        log.info("a call of %d inputs failed (%s): %s", len(batch), exc.reason, exc)
        await asyncio.gather(*(self._job_failed(p.payload, exc) for p in batch))

    def _to_split(self, batch: Sequence[Pending[J]], exc: EmbedStreamError, split: bool) -> bool:
        """A server error is split only once its batch fails a second time: a job of it failed
        before (a retry: its first failure may have been a blip, never split for) or would
        be dead-lettered now, which it must not be for its batch-mates' fault; then on down
        to the jobs that fail alone. Unsplit, each of a poison input's batch-mates spent
        attempts with it (10 such among 2,000 good requests: up to 5, one good dead-lettered)."""
        return (
            len(batch) > 1
            and exc.reason in SERVER_ERROR_REASONS
            and (split or any(self._known_failing(p.payload) for p in batch))
        )

    def _known_failing(self, job: J) -> bool:
        return job.first_failure_ms is not None or job.attempts >= self._max_attempts

    async def _job_failed(self, job: J, exc: EmbedStreamError) -> None:
        if not exc.retriable or job.attempts >= self._max_attempts:
            await self._dead_letter(job, exc)
            return
        if job.first_failure_ms is None:
            job.first_failure_ms = self._clock_ms()
            job.first_error = f"{exc.reason}: {exc.message}"
        delay = self._backoff.delay(job.attempts, self._rng, exc.retry_after)
        log.debug(
            "retry %s after attempt %d in %.1fs (%s)", job.id, job.attempts, delay, exc.reason
        )
        self._observer.count_retry(exc.reason)
        await self._outcomes.retry_later(job, exc, delay)

    async def _dead_letter(self, job: J, exc: EmbedStreamError) -> None:
        if not isinstance(exc, RequestRefused):  # that one is logged once for its call
            log.warning("dead-lettered %s after %d attempts (%s)", job.id, job.attempts,
                        exc.reason)  # fmt: skip
        self._observer.count_dead_letter(exc.reason)
        await self._outcomes.dead_letter(job, exc)

    async def _succeeded(
        self, key: BucketKey, batch: Sequence[Pending[J]], mapping: list[int], outcome: BatchOutcome
    ) -> None:
        # The provider reports usage per call; each job gets its share by estimate, the
        # shares summing to the provider's count.
        shares = apportion(outcome.total_tokens, list(map(_tokens, batch)))
        vectors = outcome.vectors  # Embedded(...) built without its generated __new__'s call:
        done = [_tuple_new(Embedded, (p.payload, vectors[i], share))
                for p, i, share in zip(batch, mapping, shares, strict=True)]  # fmt: skip
        if self._failing:
            for p in batch:
                self._failing.succeeded(p.payload.input)
        await self._outcomes.succeeded(key, done, outcome.dimensions)
