"""The provider budget of a fleet: every process and replica of a deployment draws on one
budget kept in a store (`engine/budget_redis.py`, or the one-host ledger of
`engine/budget_socket.py`), so N processes with the org's limits in their settings send what
one process would.

Each call is asked of the store (one round trip: a lease, or a wait), given back when it ends,
and the member's leases, busy lanes and lower-call caps are renewed by a heartbeat, so a member
killed without a goodbye frees its slots within the lease time. Each answer shows the fleet
(calls in flight per lane, lanes active anywhere, the shared gate and pace), which the member's
plan (a `Governor`) cuts its batches by. A release anywhere wakes the members waiting for a slot.

When the store is out of reach or slow (an answer later than ``timeout_s``), the member keeps to
its share alone: the limit and the RPM/TPM over the members last seen; it says so once in the
log and in ``embedstream_budget_on_own_share``, and rejoins at the first heartbeat answered.
Nothing is lost meanwhile: calls go on within the share. The heartbeat re-registers every lease
the member holds, so after a store restart the fleet's count is whole again within one beat.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import math
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from embedstream.core.budget import FleetView, Lease, LeaseWait
from embedstream.core.governor import Governor
from embedstream.core.lanes import Priority
from embedstream.core.ledger import (
    AskTerms,
    BudgetStore,
    Granted,
    Roster,
    Snapshot,
    lease_id,
    lease_lane,
)
from embedstream.core.observer import BudgetObserver, NullBudgetObserver
from embedstream.core.ratelimit import RateLimits, TokenBucket
from embedstream.errors import EmbedStreamError

log = logging.getLogger(__name__)

LEASE_TTL_S = 3.0  # a killed member's slots come back within this
HEARTBEAT_S = 0.5  # leases renewed, activity and caps told, the roster read
# A store slower than this counts as out of reach. Not much less: a busy event loop makes
# every await look slow, and a member fleeing to its own share at each stall gains nothing.
STORE_TIMEOUT_S = 0.5
GATE_MESSAGE = "gate|"
GIVEN_BACK_KEPT = 4096  # a release message telling of a gate closed, with its milliseconds


class SharedBudget:
    def __init__(
        self,
        store: BudgetStore,
        governor: Governor,
        *,
        member: str,
        role: str,
        monotonic: Callable[[], float],
        rpm: float | None = None,
        tpm: float | None = None,
        lease_ttl_s: float = LEASE_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
        timeout_s: float = STORE_TIMEOUT_S,
        observer: BudgetObserver | None = None,
    ) -> None:
        """``governor``: this member's plan, built without RPM/TPM (the fleet's buckets keep
        them); ``rpm``/``tpm``: the fleet's (the org's) limits; ``role``: what the member is
        (processor, gateway), for the roster."""
        self._store = store
        self._governor = governor
        self.member = member
        self._role = role
        self._monotonic = monotonic
        self._rpm, self._tpm = rpm, tpm
        self._lease_ttl_ms = int(lease_ttl_s * 1000)
        self._heartbeat_s = heartbeat_s
        self._timeout_s = timeout_s
        self._observer = observer or NullBudgetObserver()
        self._serials = itertools.count(1)
        self._held: dict[str, Priority] = {}  # this member's leases
        # Leases this member gave back, until their release message comes round: not a call
        # elsewhere ending (ours were never counted among the others').
        self._given_back: set[str] = set()
        self._tables: dict[int, tuple[int, ...]] = {}  # slot tables by limit
        self.on_own = False  # the store is out of reach: keep to the share alone
        self.roster: Roster | None = None  # the fleet as the last heartbeat listed it
        self._members = 1
        self._released = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Task[None]] = set()  # releases and gate shares on their way
        self._gate_told = 0.0  # the latest gate end told to the fleet (monotonic)
        self._wakes: list[Callable[[], None]] = []  # the batcher's: plan again

    # -- the port ---------------------------------------------------------------------------

    @property
    def plan(self) -> Governor:
        return self._governor

    def admit(self, lane: Priority, inputs: int, tokens: int) -> Lease | None:
        self._governor.started(lane)
        return self._own_lease(lane, tokens) if self.on_own else None

    async def ask(self, lane: Priority, inputs: int, tokens: int) -> Lease | LeaseWait:
        if self.on_own:
            return self._own_lease(lane, tokens)
        name = lease_id(lane, self.member, next(self._serials))
        started = self._monotonic()
        try:
            async with asyncio.timeout(self._timeout_s):
                counted = self._governor.calibration.scale(tokens)
                answer = await self._store.ask(self.member, name, counted, self._terms())
        except (OSError, TimeoutError) as exc:
            self._observer.observe_budget_round_trip(self._monotonic() - started, ok=False)
            self._fall_back(exc)
            return self._own_lease(lane, tokens)
        self._observer.observe_budget_round_trip(self._monotonic() - started, ok=True)
        if isinstance(answer, Granted):
            self._held[name] = lane
            self._see(answer.snapshot)
            return Lease(lane, answer.go_in_ms / 1000.0, name)
        self._see(answer.snapshot)
        self._observer.count_budget_wait(lane.label, answer.reason)
        return LeaseWait(answer.wait_ms / 1000.0, answer.reason)  # type: ignore[arg-type]

    async def woken(self, wait: LeaseWait) -> None:
        if wait.reason != "slots":  # the gate and the pace end at their time, not at a release
            await asyncio.sleep(wait.seconds)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait.seconds):
                await self._released.wait()

    def release(self, lane: Priority, lease: Lease | None, oldest_s: float | None) -> None:
        self._governor.finished(lane, oldest_s)
        if lease is None or not lease.id:
            return
        self._held.pop(lease.id, None)
        self._wake()  # a slot of ours is free: our own waiters may take it at once
        if not self.on_own:
            if len(self._given_back) > GIVEN_BACK_KEPT:  # no messages come (a broken link)
                self._given_back.clear()
            self._given_back.add(lease.id)
            self._background(self._release(lease.id))

    def succeeded(self, latency_s: float, headers: Mapping[str, str]) -> None:
        self._governor.on_success(latency_s, headers)
        self._tell_gate()

    def failed(self, error: EmbedStreamError) -> None:
        self._governor.on_failure(error)
        self._tell_gate()

    def counted(self, estimated_tokens: int, reported_tokens: int) -> None:
        self._governor.calibration.observe(estimated_tokens, reported_tokens)

    def hold(self, seconds: float) -> None:
        self._governor.hold(seconds)
        self._tell_gate()

    def on_change(self, wake: Callable[[], None]) -> None:
        self._wakes.append(wake)

    async def open(self) -> None:
        self._governor.rates = RateLimits.unlimited()  # the fleet's buckets pace
        await self._beat()
        self._tasks = [
            asyncio.create_task(self._beating(), name="budget heartbeat"),
            asyncio.create_task(self._listening(), name="budget releases"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in [*self._tasks, *self._pending]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if not self.on_own:
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(self._timeout_s * 4):
                    await self._store.leave(self.member)
        await self._store.close()

    # -- the fleet as seen ------------------------------------------------------------------

    def _see(self, snapshot: Snapshot) -> None:
        now = self._monotonic()
        mine = dict.fromkeys(Priority, 0)
        for lane in self._held.values():
            mine[lane] += 1
        others = {lane: max(0, snapshot.in_flight[lane] - mine[lane]) for lane in Priority}
        active = {
            lane: now - ago / 1000.0
            for lane, ago in zip(Priority, snapshot.seen_ago_ms, strict=True)
            if ago >= 0
        }
        lower = {
            lane: items
            for lane, items in zip(Priority, snapshot.lower_call_items, strict=True)
            if items > 0
        }
        self._members = max(1, snapshot.members)
        before = self._governor.fleet
        view = FleetView(others, active, now + snapshot.blocked_ms / 1000.0, self._members, lower)
        self._governor.see_fleet(view)
        if before is None or sum(others.values()) < sum(before.others_in_flight.values()):
            for wake in self._wakes:
                wake()  # fewer calls elsewhere than last seen: room for ours
        self._observer.set_budget_fleet(
            self._members,
            {lane.label: snapshot.in_flight[lane] for lane in Priority},
            {lane.label: mine[lane] for lane in Priority},
        )

    def _terms(self) -> AskTerms:
        governor = self._governor
        limit = governor.limit.limit
        table = self._tables.get(limit)
        if table is None:
            table = self._tables[limit] = tuple(governor.reservations.slot_table(limit))
        recent = tuple(int(governor.reservations.terms[lane].recent_s * 1000) for lane in Priority)
        (rpm, rpm_burst), (tpm, tpm_burst) = self._rates()
        return AskTerms(limit, table, recent, self._lease_ttl_ms, rpm, tpm, rpm_burst, tpm_burst)

    def _rates(self) -> tuple[tuple[float | None, float | None], ...]:
        """The fleet's RPM and TPM, each with its burst: the settings' (a minute's
        allowance), or what the provider announces where that is tighter (paced as
        `AnnouncedBudget` paces one process: a second's refill)."""
        announced = self._governor.announced.limits
        return (
            _tighter(self._rpm, announced.requests),
            _tighter(self._tpm, announced.tokens),
        )

    # -- on its own ---------------------------------------------------------------------------

    def _own_lease(self, lane: Priority, tokens: int) -> Lease:
        name = lease_id(lane, self.member, next(self._serials))
        self._held[name] = lane  # told to the store at the next heartbeat answered
        return Lease(lane, self._governor.reserve(tokens), name)

    def _fall_back(self, exc: BaseException) -> None:
        if self.on_own:
            return
        self.on_own = True
        members = self._members
        what = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        log.warning(
            "provider budget (member %s): the store is out of reach (%s); keeping to 1/%d of "
            "the limits alone until it answers again",
            self.member,
            what[:200],
            members,
        )
        self._governor.see_fleet(FleetView(members=members, shared=False))
        rpm, tpm = self._rpm, self._tpm  # announced budgets pace each process already
        self._governor.rates = RateLimits(
            rpm / members if rpm else None, tpm / members if tpm else None
        )
        self._observer.set_budget_on_own_share(True)
        self._wake()

    def _rejoin(self) -> None:
        self.on_own = False
        self._governor.rates = RateLimits.unlimited()
        log.warning(
            "provider budget (member %s): the store answers again; back on the fleet's budget",
            self.member,
        )
        self._observer.set_budget_on_own_share(False)

    # -- background -------------------------------------------------------------------------

    async def _beat(self) -> None:
        governor = self._governor
        active = [int(lane) for lane in governor.active_here()]
        caps = {
            int(lane): target.lower_call_items
            for lane, target in governor.reservations.targets.items()
            if lane in governor.seen_here
        }
        started = self._monotonic()
        try:
            async with asyncio.timeout(self._timeout_s):
                roster = await self._store.heartbeat(
                    self.member, self._role, self._lease_ttl_ms, list(self._held), active, caps
                )
        except (OSError, TimeoutError) as exc:
            self._observer.observe_budget_round_trip(self._monotonic() - started, ok=False)
            self._fall_back(exc)
            return
        self._observer.observe_budget_round_trip(self._monotonic() - started, ok=True)
        if self.on_own:
            self._rejoin()
        self.roster = roster
        self._see(roster.snapshot)

    async def _beating(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            await self._beat()

    async def _listening(self) -> None:
        while True:
            try:
                async for name in self._store.releases():
                    self._released_elsewhere(name)
            except (OSError, TimeoutError):
                pass
            await asyncio.sleep(self._heartbeat_s)  # then subscribe again

    def _released_elsewhere(self, name: str) -> None:
        """A lease was given back: one call fewer in the fleet than last seen, at once (the
        next answer corrects the picture if it was not one we counted). Or a member closed
        the gate: every call here is held from now, and the online lane answers 429 at once
        rather than queueing callers behind it."""
        view = self._governor.fleet
        if name.startswith(GATE_MESSAGE):
            if view is not None and view.shared:
                until = self._monotonic() + int(name[len(GATE_MESSAGE) :]) / 1000.0
                if until > view.blocked_until:
                    self._governor.see_fleet(dataclasses.replace(view, blocked_until=until))
            return
        if name in self._given_back:
            self._given_back.discard(name)
        elif name not in self._held and view is not None and view.shared:
            lane = Priority(lease_lane(name))
            others = dict(view.others_in_flight)
            if others.get(lane, 0) > 0:
                others[lane] -= 1
                self._governor.see_fleet(dataclasses.replace(view, others_in_flight=others))
        self._wake()

    async def _release(self, name: str) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                snapshot = await self._store.release(name)
        except (OSError, TimeoutError):
            self._given_back.discard(name)  # no message will come round for it
            return  # the heartbeat tells the store what we still hold
        self._see(snapshot)

    def _tell_gate(self) -> None:
        """A gate this member closed (a 429's retry-after, exhausted headers, a hold) closes
        for the fleet too."""
        now = self._monotonic()
        until = now + self._governor.gate.blocked_for(now)
        if until <= self._gate_told + 0.001 or until <= now or self.on_own:
            return
        self._gate_told = until
        self._background(self._block(math.ceil((until - now) * 1000)))

    async def _block(self, for_ms: int) -> None:
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(self._timeout_s):
                await self._store.block(for_ms)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _wake(self) -> None:
        """A slot may be free or the fleet's picture changed: calls waiting for a lease ask
        again, and the batcher plans again (its own events would not tell it)."""
        released, self._released = self._released, asyncio.Event()
        released.set()
        for wake in self._wakes:
            wake()


def _tighter(
    per_minute: float | None, announced: TokenBucket | None
) -> tuple[float | None, float | None]:
    """(per minute, burst) of the tighter of a setting and an announced budget."""
    if announced is None or (per_minute is not None and per_minute <= announced.rate_per_s * 60.0):
        return per_minute, None
    return announced.rate_per_s * 60.0, announced.burst
