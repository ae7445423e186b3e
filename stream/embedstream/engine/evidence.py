"""What the provider's answers tell the batch-call path (`engine/calls.py`): whether it is
serving others, and which inputs it fails even alone.

An outage-like failure (connection, timeout, 5xx) is a job's own only if the provider served
someone else meanwhile; a failure in a provider that is down says nothing about the job. While
calls that may tell are in flight, their answers are waited for rather than the batch sent
again to find out. An input the provider failed alone with a server error is likely to fail
again: its next call goes without batch-mates, whom it would fail too.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from embedstream.errors import PermanentItemError

T = TypeVar("T")

# Inputs remembered as failing alone: a few poison inputs among many, not a second cache.
FAILING_INPUTS_KEPT = 1024


class ServiceEvidence:
    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self._clock_ms = clock_ms
        self._last_served_ms: int | None = None  # when the last call answered was sent
        self._last_answer_ms: int | None = None  # and when the last answer came
        self._unanswered: list[int] = []  # when each call in flight was sent
        self._answered = asyncio.Event()  # set (and replaced) at each call's answer
        self._stopped = False

    async def call(self, answer: Awaitable[T], sent_ms: int) -> T:
        """`answer` (a provider call sent at `sent_ms`), counted in flight until it comes."""
        self._unanswered.append(sent_ms)
        try:
            outcome = await answer
        except PermanentItemError:
            self._served(sent_ms)  # an answer about its inputs: the provider is there
            raise
        else:
            self._served(sent_ms)
            return outcome
        finally:
            self._unanswered.remove(sent_ms)
            answered, self._answered = self._answered, asyncio.Event()
            answered.set()

    def _served(self, sent_ms: int) -> None:
        # When it was sent, not answered: a call the provider accepted before a job's failure
        # and answered after it (a stopping server finishes what it accepted) says nothing
        # about the provider serving anyone since.
        self._last_served_ms = max(self._last_served_ms or sent_ms, sent_ms)
        self._last_answer_ms = self._clock_ms()

    def served_after(self, since_ms: int) -> bool:
        """A call sent after `since_ms` has been answered."""
        return self._last_served_ms is not None and self._last_served_ms > since_ms

    def answered_since(self, since_ms: int) -> bool:
        """A call has been answered at or after `since_ms` (whenever it was sent)."""
        return self._last_answer_ms is not None and self._last_answer_ms >= since_ms

    async def wait_for_answers(self, told: Callable[[], bool], down: Callable[[], bool]) -> bool:
        """Until `told()`, or no call in flight can tell any more, or `down()` (the provider
        looks down); False if stopped meanwhile."""
        while self._unanswered and not down() and not told():
            if self._stopped:
                return False
            await self._answered.wait()
        return not self._stopped

    def stop(self) -> None:
        """End every wait (a bounded shutdown abandons what was held)."""
        self._stopped = True
        self._answered.set()


class FailingInputs:
    """Inputs whose last call alone failed with a server error (the most recent
    FAILING_INPUTS_KEPT), until one of their calls succeeds."""

    def __init__(self) -> None:
        self._inputs: OrderedDict[Hashable, None] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._inputs)

    def __contains__(self, value: Hashable) -> bool:
        return value in self._inputs

    def failed_alone(self, value: Hashable) -> None:
        self._inputs[value] = None
        self._inputs.move_to_end(value)
        if len(self._inputs) > FAILING_INPUTS_KEPT:
            self._inputs.popitem(last=False)

    def succeeded(self, value: Hashable) -> None:
        self._inputs.pop(value, None)
