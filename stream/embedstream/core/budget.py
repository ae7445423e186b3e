"""The provider budget as a port: what an engine asks before a provider call and reports after
it. Pure types; the implementations are `engine/budget_local.py` (one process owns the
provider) and `engine/budget_shared.py` (every process and replica of a deployment draws on
one budget kept in a store: Redis, or the supervisor's ledger on one host).

Before a call: the lane, its inputs and tokens; the answer is a :class:`Lease` to go now
(after ``go_in_s`` of pacing, holding the slot), or a :class:`LeaseWait` (ask again after at
most that long, sooner when woken by a slot coming free). After it: the outcome, its latency
and headers, a 429's retry-after. Behind the port sit the lanes' reservation rule
(`core/reservations.py`), the lane targets, the adaptive limit, the RPM/TPM and announced
budgets, the 429 gate and the outage state (`core/governor.py` holds them for one process).

The batcher plans with the budget's ``plan``, a :class:`~embedstream.core.governor.Governor`:
which lane goes next, how big a call may be, how many slots a backlog spreads over. A shared
budget feeds its plan the fleet as last seen (:class:`FleetView`), so the plan is the fleet's,
a round trip old; the lease is the fleet's decision, atomic in the store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from embedstream.core.lanes import Priority
from embedstream.errors import EmbedStreamError

if TYPE_CHECKING:
    from embedstream.core.governor import Governor

WaitReason = Literal["slots", "gate", "rates", "store"]


@dataclass(frozen=True, slots=True)
class Lease:
    """Leave to make one provider call of ``lane``: hold the slot ``go_in_s`` first (the
    RPM/TPM pace), then call. ``id`` names a fleet's lease ("" for a process alone)."""

    lane: Priority
    go_in_s: float = 0.0
    id: str = ""


@dataclass(frozen=True, slots=True)
class LeaseWait:
    """No call now: ask again within ``seconds`` (sooner when a slot comes free)."""

    seconds: float
    reason: WaitReason


@dataclass(frozen=True, slots=True)
class FleetView:
    """The fleet's use of the budget as one store answer gave it, on this process's clock.

    ``others_in_flight``: calls of other members per lane; ``active_at``: when each lane was
    last seen active anywhere; ``blocked_until``: the shared 429 gate and the RPM/TPM pace;
    ``lower_call_items``: what the members steering a lane held to a target
    (`core/targets.py`) let lower lanes' calls hold. ``shared`` is False while the store is
    out of reach: the member then keeps to ``1 / members`` of the limits on its own.
    """

    others_in_flight: Mapping[Priority, int] = field(default_factory=dict)
    active_at: Mapping[Priority, float] = field(default_factory=dict)
    blocked_until: float = 0.0
    members: int = 1
    lower_call_items: Mapping[Priority, int] = field(default_factory=dict)
    shared: bool = True

    def share(self, limit: int) -> int:
        """This member's part of ``limit`` while on its own: the limit over the members last
        seen, at least one."""
        return max(1, limit // max(1, self.members))


class ProviderBudget(Protocol):
    """The one budget an engine draws on before and after each provider call."""

    @property
    def plan(self) -> Governor:
        """The rule the batcher plans its cuts with (this process's view of the budget)."""
        ...

    def admit(self, lane: Priority, inputs: int, tokens: int) -> Lease | None:
        """A call of ``lane`` is cut now (counted from here). A lease when the budget decides
        at once (a process alone); None when the fleet decides: :meth:`ask` then."""
        ...

    def ask(self, lane: Priority, inputs: int, tokens: int) -> Awaitable[Lease | LeaseWait]:
        """The fleet's decision on a call admitted without a lease."""
        ...

    def woken(self, wait: LeaseWait) -> Awaitable[None]:
        """Until it is worth asking again: ``wait.seconds`` at most."""
        ...

    def release(self, lane: Priority, lease: Lease | None, oldest_s: float | None) -> None:
        """The call admitted for ``lane`` is over (``lease``: None if it never got one);
        ``oldest_s``: how long its oldest item took, arrival to answer."""
        ...

    def succeeded(self, latency_s: float, headers: Mapping[str, str]) -> None:
        """A provider call answered."""
        ...

    def failed(self, error: EmbedStreamError) -> None:
        """A provider call failed (a 429's retry-after closes the gate for everyone)."""
        ...

    def counted(self, estimated_tokens: int, reported_tokens: int) -> None:
        """A call estimated at ``estimated_tokens`` was counted ``reported_tokens`` by the
        provider: the pace's calibration (`core/calibration.py`)."""
        ...

    def hold(self, seconds: float) -> None:
        """Nobody calls for ``seconds`` (the provider refuses everyone, or is down)."""
        ...

    def on_change(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` whenever the budget may admit a call it did not before without this
        process's own doing (a slot freed elsewhere in the fleet, the fleet's gate opened):
        the batcher plans again then."""
        ...

    def open(self) -> Awaitable[None]:
        """Join the budget (a fleet's: register, start the heartbeat)."""
        ...

    def close(self) -> Awaitable[None]:
        """Leave it: leases given back, membership ended."""
        ...


def active_mask(active: Collection[Priority]) -> int:
    """The lanes of ``active`` as bits (bit i: lane i), as a store's slot table indexes them."""
    return sum(1 << lane for lane in active)
