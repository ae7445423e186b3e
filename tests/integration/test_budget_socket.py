"""The one-host fleet budget (`engine/budget_socket.py`): the supervisor's ledger on a Unix
socket, and members on it as on Redis: leases within the slots, a release waking a waiter, the
shared gate, and a member on its own share while the ledger is gone, back when it returns."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from embedstream.core.budget import Lease, LeaseWait
from embedstream.core.configured import ONLINE_LANE
from embedstream.core.governor import Governor, default_lanes
from embedstream.core.lanes import Priority
from embedstream.engine.budget_shared import SharedBudget
from embedstream.engine.budget_socket import LedgerServer, SocketBudgetStore
from embedstream.errors import Reason, TransientError
from embedstream.testing import eventually


def member(url: str, name: str, limit: int = 4) -> SharedBudget:
    governor = Governor(
        max_concurrency=limit, clock=time.monotonic, lanes=default_lanes(0.1, online=ONLINE_LANE)
    )
    return SharedBudget(
        SocketBudgetStore(url), governor, member=name, role="processor", monotonic=time.monotonic
    )


async def lease(budget: SharedBudget) -> Lease | LeaseWait:
    assert budget.admit(Priority.HIGH, 1, 10) is None
    return await budget.ask(Priority.HIGH, 1, 10)


async def test_members_on_the_parents_ledger_share_its_slots_and_its_gate(tmp_path: Path) -> None:
    server = LedgerServer(tmp_path / "budget.sock")
    await server.start()
    a, b = member(server.url, "a"), member(server.url, "b")
    await a.open()
    await b.open()
    try:
        held = [await lease(a) for _ in range(4)]
        assert all(isinstance(h, Lease) for h in held)
        waiting = await lease(b)
        assert isinstance(waiting, LeaseWait) and waiting.reason == "slots"
        woke = asyncio.create_task(b.woken(waiting))
        await asyncio.sleep(0.01)
        started = time.monotonic()
        a.release(Priority.HIGH, held[0], 0.01)  # type: ignore[arg-type]
        await woke
        assert time.monotonic() - started < 0.2  # the release pushed to b, not its recheck
        got = await b.ask(Priority.HIGH, 1, 10)
        assert isinstance(got, Lease)
        b.release(Priority.HIGH, got, 0.01)
        a.failed(TransientError(Reason.RATE_LIMITED, "429", retry_after=1.0))
        await asyncio.sleep(0.05)
        gated = await lease(b)
        assert isinstance(gated, LeaseWait) and gated.reason == "gate"
        assert 0.8 < gated.seconds <= 1.0
        assert server.ledger.members.keys() == {"a", "b"}
    finally:
        await a.close()
        await b.close()
        await server.stop()
    assert server.ledger.leases == {}  # both left: every lease given back


async def test_a_member_keeps_to_its_share_while_the_ledger_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "budget.sock"
    server = LedgerServer(path)
    await server.start()
    a = member(server.url, "a")
    await a.open()
    try:
        first = await lease(a)
        assert isinstance(first, Lease) and not a.on_own
        await server.stop()  # the supervisor's ledger is gone (say, restarting)
        second = await lease(a)
        assert isinstance(second, Lease) and a.on_own
        server = LedgerServer(path)
        await server.start()
        await eventually(lambda: not a.on_own, timeout_s=5.0, poll_s=0.05)
        # the new ledger holds both leases: the one from before and the one taken alone
        assert len(server.ledger.leases) == 2
    finally:
        await a.close()
        await server.stop()
