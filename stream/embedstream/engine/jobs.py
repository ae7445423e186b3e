"""What flows through the engine (a :class:`Job`) and what comes out of it (:class:`Outcomes`).

A job is one text on its way to the provider, with the retry state the batch-call path keeps
on it. The Kafka processor and the in-process client each extend it with what they need to
answer (Kafka coordinates, a future) and implement :class:`Outcomes` to deliver the answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from embedstream.core.lanes import BucketKey
from embedstream.core.tracing import NULL_SPAN, RequestSpan
from embedstream.errors import EmbedStreamError
from embedstream.wire import Vector
from embedstream.wire.openai import Input, TokenIds


@dataclass(slots=True, eq=False, kw_only=True)
class Job:
    id: str  # for logs: the request id (never the text)
    text: str
    tokens: int  # estimate of the text as sent
    deadline_ms: int | None = None  # epoch ms after which the job is not worth sending
    attempts: int = 0  # calls made for it so far (carried across retries)
    first_failure_ms: int | None = None
    first_error: str | None = None
    # Its process span (tracing on): provider calls link to it, outcome records carry it.
    span: RequestSpan = NULL_SPAN
    token_ids: TokenIds | None = None  # sent instead of the text (an online caller's ids)
    # An online caller's `user`: sent with a call whose inputs all have the same one; not part
    # of the bucket key, so callers passing end-user ids still share calls and the cache.
    user: str | None = None

    @property
    def input(self) -> Input:
        """What the call sends for it: its token ids, or its text."""
        return self.text if self.token_ids is None else self.token_ids


J = TypeVar("J", bound=Job)


@dataclass(frozen=True, slots=True)
class Hit(Generic[J]):
    """A job answered without a call of its own (the cache, or another call sending its
    text), in the encoding it asked for."""

    job: J
    key: BucketKey
    vector: Vector
    dimensions: int


class Embedded(NamedTuple, Generic[J]):
    """One job's vector (a tuple: one is made per item, on the hot path)."""

    job: J
    vector: Vector
    tokens: int  # the job's share of the call's reported usage, in proportion to its estimate


class Outcomes(ABC, Generic[J]):
    """Delivers every job's outcome. Each job gets exactly one of these calls."""

    @abstractmethod
    async def succeeded(self, key: BucketKey, done: Sequence[Embedded[J]], dimensions: int) -> None:
        """A call returned these vectors (one per job, in batch order)."""

    @abstractmethod
    def answered(self, hits: Sequence[Hit[J]]) -> None:
        """These jobs were answered without a call of their own: from the cache, or by
        another call sending the same text (no tokens charged)."""

    @abstractmethod
    async def retry_later(self, job: J, error: EmbedStreamError, delay_s: float) -> None:
        """This attempt failed in a way a later one may not: try again after `delay_s`."""

    @abstractmethod
    async def dead_letter(self, job: J, error: EmbedStreamError) -> None:
        """The job can never succeed, or has used up its attempts."""

    def waits_for_model(self, job: J) -> bool:
        """Whether a job whose model the provider does not serve waits until it does (Kafka
        work: the model may be deployed meanwhile), rather than failing at once (an online
        caller, `engine.callers.Callers`)."""
        return True

    @abstractmethod
    def abandoned(self, jobs: Sequence[J]) -> None:
        """Shutdown came while these were held back (rate limit, outage): no outcome. Kafka
        leaves their offsets uncommitted (re-read on restart); the client fails the callers."""
