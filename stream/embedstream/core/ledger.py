"""The fleet's budget ledger: the state every member of a deployment decides its provider calls
on, and the rule of each decision. Pure: time comes in as milliseconds of the store's clock.

This is the reference: the Redis store runs the same decisions as Lua scripts
(`engine/budget_redis.py`, tested against this class), and the supervisor of one host's lane
processes keeps an instance of it in memory (`engine/budget_socket.py`).

The state: leases (one per call in flight, each with an expiry, so a member killed without a
goodbye gives its slots back within the lease time), the lanes' last activity, the 429 gate,
the RPM/TPM buckets, the members (each with an expiry its heartbeats push back) and what the
members steering a lane held to a target let lower lanes' calls hold.

A decision (:meth:`FleetLedger.ask`): the gate or the pace hold every call; otherwise a lane
gets a slot when the fleet has fewer calls in flight than the limit and the lane fewer than its
cap, which the member passes as a table indexed by the lanes active anywhere
(`core/reservations.py`: ``Reservations.slot_table``), so the reservation rule is written once.
A lease commits one request and its tokens to the buckets and may come with a pace to hold
first (``go_in_ms``), as the in-process budget's does. The buckets' debt is a queue in the
order of asking, so while a lane above it is active a call takes no debt: it waits, reserving
nothing, until the buckets hold it whole, and the upper lane's calls never queue behind it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from embedstream.core.lanes import Priority
from embedstream.core.ratelimit import TokenBucket

LANES = len(Priority)
MASKS = 1 << LANES
# A call denied for want of a slot asks again within this long even if no release wakes it
# (a release message lost, a lease expiring).
SLOT_RECHECK_MS = 250


def lease_id(lane: Priority, member: str, serial: int) -> str:
    """A lease's name: its lane and member can be read back from it (the Lua script does)."""
    if "|" in member:
        raise ValueError(f"a member name may not contain '|': {member!r}")
    return f"{int(lane)}|{member}|{serial}"


def lease_lane(lease: str) -> int:
    return int(lease.split("|", 1)[0])


def lease_member(lease: str) -> str:
    return lease.split("|", 2)[1]


@dataclass(frozen=True, slots=True)
class AskTerms:
    """What a member's settings make of a decision: the in-flight limit, the lanes' slot caps
    under it (``slot_table``), how long an item keeps each lane active, the lease time and
    the fleet's RPM/TPM (None: unlimited)."""

    limit: int
    slot_table: tuple[int, ...]
    recent_ms: tuple[int, ...]
    lease_ttl_ms: int
    rpm: float | None = None
    tpm: float | None = None
    rpm_burst: float | None = None  # None: a minute's allowance, as `RateLimits` keeps
    tpm_burst: float | None = None

    def __post_init__(self) -> None:
        if len(self.slot_table) != LANES * MASKS or len(self.recent_ms) != LANES:
            raise ValueError("slot_table needs a cap per lane and mask, recent_ms one per lane")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The fleet as one answer shows it: calls in flight per lane, how long ago each lane was
    last active (-1: never), how long every call is held (gate or pace), the members alive
    and the lower-call caps of lanes held to a target (0: none)."""

    in_flight: tuple[int, ...]
    seen_ago_ms: tuple[int, ...]
    blocked_ms: int
    members: int
    lower_call_items: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Granted:
    go_in_ms: int
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class Denied:
    wait_ms: int
    reason: str  # "gate", "rates" or "slots"
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class MemberUse:
    """One member as the heartbeat's roster lists it."""

    member: str
    role: str
    in_flight: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Roster:
    snapshot: Snapshot
    members: tuple[MemberUse, ...]


class FleetLedger:
    def __init__(self) -> None:
        self.leases: dict[str, int] = {}  # lease -> expiry (ms)
        self.active: dict[int, int] = {}  # lane -> last seen (ms)
        self.gate_until_ms = 0
        self.members: dict[str, int] = {}  # member -> expiry (ms)
        self.roles: dict[str, str] = {}
        self.caps: dict[tuple[str, int], int] = {}  # (member, lane) -> lower_call_items
        self._requests: TokenBucket | None = None
        self._tokens: TokenBucket | None = None

    # -- the decisions ------------------------------------------------------------------

    def ask(
        self, now_ms: int, member: str, lease: str, tokens: int, terms: AskTerms
    ) -> Granted | Denied:
        """May the call named ``lease`` (its lane inside the name) go now?"""
        self._expire(now_ms)
        lane = lease_lane(lease)
        self.active[lane] = now_ms
        self._tune(terms, now_ms)
        blocked, reason = self._blocked(now_ms)
        if blocked > 0:
            return Denied(blocked, reason, self.snapshot(now_ms))
        counts = self._counts()
        mask = self._mask(now_ms, terms.recent_ms)
        cap = terms.slot_table[lane * MASKS + mask]
        if sum(counts) >= terms.limit or counts[lane] >= cap:
            return Denied(SLOT_RECHECK_MS, "slots", self.snapshot(now_ms))
        if mask & ((1 << lane) - 1):  # an upper lane is active: no debt it would queue behind
            room_ms = self._room_wait(tokens, now_ms)
            if room_ms > 0:
                return Denied(room_ms, "rates", self.snapshot(now_ms))
        go_in_ms = self._reserve(tokens, now_ms)
        self.leases[lease] = now_ms + terms.lease_ttl_ms + go_in_ms
        return Granted(go_in_ms, self.snapshot(now_ms))

    def release(self, now_ms: int, lease: str) -> Snapshot:
        self.leases.pop(lease, None)
        self._expire(now_ms)
        return self.snapshot(now_ms)

    def block(self, now_ms: int, for_ms: int) -> None:
        """Nobody calls for ``for_ms`` (a 429's retry-after, a provider down)."""
        self.gate_until_ms = max(self.gate_until_ms, now_ms + for_ms)

    def heartbeat(
        self,
        now_ms: int,
        member: str,
        role: str,
        ttl_ms: int,
        leases: Collection[str],
        active: Collection[int],
        caps: Mapping[int, int],
    ) -> Roster:
        """A member is alive and holds exactly ``leases`` (re-made if the store lost them: a
        restart), its lanes in ``active`` have work waiting, and it steers the lower-call
        caps in ``caps``."""
        self.members[member] = now_ms + ttl_ms
        self.roles[member] = role
        for name in [name for name in self.leases if lease_member(name) == member]:
            if name not in leases:
                del self.leases[name]  # released, but the release was lost
        for name in leases:
            self.leases[name] = max(self.leases.get(name, 0), now_ms + ttl_ms)
        for lane in active:
            self.active[lane] = max(self.active.get(lane, 0), now_ms)
        for key in [key for key in self.caps if key[0] == member]:
            del self.caps[key]
        for lane, items in caps.items():
            self.caps[(member, lane)] = items
        self._expire(now_ms)
        return self.roster(now_ms)

    def leave(self, member: str) -> None:
        """A member stops: its leases, caps and membership go at once."""
        for name in [name for name in self.leases if lease_member(name) == member]:
            del self.leases[name]
        self.members.pop(member, None)
        self.roles.pop(member, None)
        for key in [key for key in self.caps if key[0] == member]:
            del self.caps[key]

    # -- what answers show ----------------------------------------------------------------

    def snapshot(self, now_ms: int) -> Snapshot:
        active = self.active
        seen = tuple(now_ms - active[lane] if lane in active else -1 for lane in range(LANES))
        lower = [0] * LANES
        for (_, lane), items in self.caps.items():
            lower[lane] = items if lower[lane] == 0 else min(lower[lane], items)
        return Snapshot(
            self._counts(),
            seen,
            self._blocked(now_ms)[0],
            len(self.members),
            tuple(lower),
        )

    def roster(self, now_ms: int) -> Roster:
        uses = []
        for member in sorted(self.members):
            counts = [0] * LANES
            for name in self.leases:
                if lease_member(name) == member:
                    counts[lease_lane(name)] += 1
            uses.append(MemberUse(member, self.roles.get(member, ""), tuple(counts)))
        return Roster(self.snapshot(now_ms), tuple(uses))

    # -- inside ---------------------------------------------------------------------------

    def _expire(self, now_ms: int) -> None:
        for name in [name for name, until in self.leases.items() if until <= now_ms]:
            del self.leases[name]
        for member in [member for member, until in self.members.items() if until <= now_ms]:
            del self.members[member]
            self.roles.pop(member, None)
            for key in [key for key in self.caps if key[0] == member]:
                del self.caps[key]

    def _counts(self) -> tuple[int, ...]:
        counts = [0] * LANES
        for name in self.leases:
            counts[lease_lane(name)] += 1
        return tuple(counts)

    def _mask(self, now_ms: int, recent_ms: tuple[int, ...]) -> int:
        mask = 0
        for lane, seen in self.active.items():
            if now_ms - seen <= recent_ms[lane]:
                mask |= 1 << lane
        return mask

    def _tune(self, terms: AskTerms, now_ms: int) -> None:
        self._requests = _tuned(self._requests, terms.rpm, terms.rpm_burst, now_ms)
        self._tokens = _tuned(self._tokens, terms.tpm, terms.tpm_burst, now_ms)

    def _blocked(self, now_ms: int) -> tuple[int, str]:
        gate = max(0, self.gate_until_ms - now_ms)
        now = now_ms / 1000.0
        pace = max(
            self._requests.wait(1, now) if self._requests is not None else 0.0,
            self._tokens.wait(0, now) if self._tokens is not None else 0.0,
        )
        pace_ms = math.ceil(pace * 1000)
        if gate >= pace_ms:
            return gate, "gate"
        return pace_ms, "rates"

    def _room_wait(self, tokens: int, now_ms: int) -> int:
        """Milliseconds until the buckets hold a call of ``tokens`` (a bucket's burst at most)
        without debt: a lower lane's call waits for that, reserving nothing meanwhile, so the
        upper lane's next call never waits behind it (the buckets' debt is a FIFO queue)."""
        now = now_ms / 1000.0
        wait = 0.0
        if self._requests is not None:
            wait = max(wait, self._requests.wait(1, now))
        if self._tokens is not None:
            wait = max(wait, self._tokens.wait(min(tokens, self._tokens.burst), now))
        return math.ceil(wait * 1000)

    def _reserve(self, tokens: int, now_ms: int) -> int:
        now = now_ms / 1000.0
        delay = 0.0
        if self._requests is not None:
            delay = max(delay, self._requests.reserve(1, now))
        if self._tokens is not None:
            delay = max(delay, self._tokens.reserve(tokens, now))
        return math.ceil(delay * 1000)


class BudgetStore(Protocol):
    """Where a fleet's budget is kept: :class:`FleetLedger`'s operations, remotely (Redis,
    or the ledger a supervisor holds on a socket)."""

    async def ask(
        self, member: str, lease: str, tokens: int, terms: AskTerms
    ) -> Granted | Denied: ...

    async def release(self, lease: str) -> Snapshot: ...

    async def block(self, for_ms: int) -> None: ...

    async def heartbeat(
        self,
        member: str,
        role: str,
        ttl_ms: int,
        leases: Collection[str],
        active: Collection[int],
        caps: Mapping[int, int],
    ) -> Roster: ...

    async def leave(self, member: str) -> None: ...

    def releases(self) -> AsyncIterator[str]:
        """The name of each lease released anywhere in the fleet, as it is, and
        ``gate|<ms>`` for each gate a member closed; ends (raises) when the link breaks."""
        ...

    async def close(self) -> None: ...


def _tuned(
    bucket: TokenBucket | None, per_minute: float | None, burst: float | None, now_ms: int
) -> TokenBucket | None:
    """The bucket for ``per_minute`` and ``burst`` (None: a minute's allowance, as
    `RateLimits`): made at the first ask, retuned when a member passes other terms, gone when
    unlimited."""
    if per_minute is None or per_minute <= 0:
        return None
    size = burst if burst is not None and burst > 0 else per_minute
    rate = per_minute / 60.0
    if bucket is None:
        return TokenBucket(rate, size)
    if bucket.burst != size or bucket.rate_per_s != rate:
        bucket.retune(rate, size, now_ms / 1000.0)
    return bucket
