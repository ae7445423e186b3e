"""The fleet budget of one host, without Redis: `core/ledger.FleetLedger` held by the process that
supervises the host's lane processes (`embedstream run`), served to them over a Unix socket.

The parent's event loop does nothing else, so a decision is a read, a call of the ledger and a
write: no lock, no script, no second server to run. The protocol is JSON lines: each request
carries an ``id`` its answer repeats (a member may have several decisions under way), and every
release is pushed to every connection as ``{"released": <lease>}``, which wakes members waiting
for a slot. Time is the parent's monotonic clock, in milliseconds, for every member alike.

The budget URL a child is given is ``ledger+unix://<path of the socket>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import orjson

from embedstream.core.ledger import (
    AskTerms,
    Denied,
    FleetLedger,
    Granted,
    MemberUse,
    Roster,
    Snapshot,
)

log = logging.getLogger(__name__)

SCHEME = "ledger+unix://"
# A line is one decision's terms at most: a slot table of 64 numbers and a few lease names.
LINE_LIMIT = 1 << 20


def ledger_url(path: Path) -> str:
    return SCHEME + str(path)


def socket_path(url: str) -> Path:
    if not url.startswith(SCHEME):
        raise ValueError(f"not a ledger URL: {url!r}")
    return Path(url[len(SCHEME) :])


# -- the wire --------------------------------------------------------------------------------


def _snapshot_json(s: Snapshot) -> dict[str, Any]:
    return {
        "in_flight": s.in_flight,
        "seen_ago_ms": s.seen_ago_ms,
        "blocked_ms": s.blocked_ms,
        "members": s.members,
        "lower_call_items": s.lower_call_items,
    }


def _snapshot(doc: Mapping[str, Any]) -> Snapshot:
    return Snapshot(
        tuple(doc["in_flight"]),
        tuple(doc["seen_ago_ms"]),
        int(doc["blocked_ms"]),
        int(doc["members"]),
        tuple(doc["lower_call_items"]),
    )


def _terms(doc: Mapping[str, Any]) -> AskTerms:
    return AskTerms(
        int(doc["limit"]),
        tuple(doc["slot_table"]),
        tuple(doc["recent_ms"]),
        int(doc["lease_ttl_ms"]),
        doc.get("rpm"),
        doc.get("tpm"),
        doc.get("rpm_burst"),
        doc.get("tpm_burst"),
    )


def _terms_json(t: AskTerms) -> dict[str, Any]:
    return {
        "limit": t.limit,
        "slot_table": t.slot_table,
        "recent_ms": t.recent_ms,
        "lease_ttl_ms": t.lease_ttl_ms,
        "rpm": t.rpm,
        "tpm": t.tpm,
        "rpm_burst": t.rpm_burst,
        "tpm_burst": t.tpm_burst,
    }


# -- the parent's side ----------------------------------------------------------------------


class LedgerServer:
    """The ledger on a Unix socket; ``clock_ms``: the parent's monotonic clock."""

    def __init__(self, path: Path, clock_ms: Callable[[], int] | None = None) -> None:
        self.path = path
        self.ledger = FleetLedger()
        self._clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return ledger_url(self.path)

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(self.path), limit=LINE_LIMIT
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while line := await reader.readline():
                request = orjson.loads(line)
                answer, released = self._decide(request)
                writer.write(orjson.dumps({"id": request["id"], **answer}) + b"\n")
                if released is not None:
                    self._broadcast(released)
        except (ConnectionError, orjson.JSONDecodeError, KeyError, ValueError) as exc:
            log.debug("budget ledger: a member's connection ended: %s", exc)
        finally:
            self._writers.discard(writer)
            writer.close()

    def _decide(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The answer to one request, and what to tell every member: the lease it released,
        or ``gate|<ms>`` for a gate it closed."""
        ledger, now, op = self.ledger, self._clock_ms(), request["op"]
        if op == "ask":
            decided = ledger.ask(
                now, request["member"], request["lease"], request["tokens"],
                _terms(request["terms"]),
            )  # fmt: skip
            if isinstance(decided, Granted):
                return {"granted": decided.go_in_ms, **_snapshot_json(decided.snapshot)}, None
            return {
                "wait_ms": decided.wait_ms,
                "reason": decided.reason,
                **_snapshot_json(decided.snapshot),
            }, None
        if op == "release":
            return _snapshot_json(ledger.release(now, request["lease"])), request["lease"]
        if op == "block":
            ledger.block(now, int(request["for_ms"]))
            return {}, f"gate|{int(request['for_ms'])}"
        if op == "heartbeat":
            caps = {int(lane): int(items) for lane, items in request["caps"].items()}
            roster = ledger.heartbeat(
                now, request["member"], request["role"], request["ttl_ms"], request["leases"],
                request["active"], caps,
            )  # fmt: skip
            uses = [[u.member, u.role, u.in_flight] for u in roster.members]
            return {**_snapshot_json(roster.snapshot), "roster": uses}, None
        if op == "leave":
            ledger.leave(request["member"])
            return {}, None
        raise ValueError(f"unknown operation {op!r}")

    def _broadcast(self, lease: str) -> None:
        line = orjson.dumps({"released": lease}) + b"\n"
        for writer in list(self._writers):
            if not writer.is_closing():
                writer.write(line)


# -- a member's side ------------------------------------------------------------------------


class SocketBudgetStore:
    """A member's connection to the parent's ledger (`engine/budget_shared.BudgetStore`).
    Connected at the first operation and again after a break; a broken connection fails
    the operations under way (OSError), as a Redis outage would."""

    def __init__(self, url: str) -> None:
        self._path = socket_path(url)
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._released: asyncio.Queue[str | None] = asyncio.Queue()
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None

    async def ask(self, member: str, lease: str, tokens: int, terms: AskTerms) -> Granted | Denied:
        doc = await self._call(
            {"op": "ask", "member": member, "lease": lease, "tokens": tokens,
             "terms": _terms_json(terms)}
        )  # fmt: skip
        if "granted" in doc:
            return Granted(int(doc["granted"]), _snapshot(doc))
        return Denied(int(doc["wait_ms"]), str(doc["reason"]), _snapshot(doc))

    async def release(self, lease: str) -> Snapshot:
        return _snapshot(await self._call({"op": "release", "lease": lease}))

    async def block(self, for_ms: int) -> None:
        await self._call({"op": "block", "for_ms": for_ms})

    async def heartbeat(
        self,
        member: str,
        role: str,
        ttl_ms: int,
        leases: Collection[str],
        active: Collection[int],
        caps: Mapping[int, int],
    ) -> Roster:
        doc = await self._call(
            {"op": "heartbeat", "member": member, "role": role, "ttl_ms": ttl_ms,
             "leases": list(leases), "active": list(active),
             "caps": {str(lane): items for lane, items in caps.items()}}
        )  # fmt: skip
        uses = tuple(MemberUse(m, r, tuple(counts)) for m, r, counts in doc["roster"])
        return Roster(_snapshot(doc), uses)

    async def leave(self, member: str) -> None:
        await self._call({"op": "leave", "member": member})

    async def releases(self) -> AsyncIterator[str]:
        await self._connect()
        while True:
            lease = await self._released.get()
            if lease is None:
                raise ConnectionResetError("the budget ledger's connection broke")
            yield lease

    async def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        writer = await self._connect()
        number = next(self._ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[number] = answer
        try:
            writer.write(orjson.dumps({"id": number, **request}) + b"\n")
            return await answer
        finally:
            self._answers.pop(number, None)

    async def _connect(self) -> asyncio.StreamWriter:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is None or self._writer.is_closing():
                reader, self._writer = await asyncio.open_unix_connection(
                    str(self._path), limit=LINE_LIMIT
                )
                self._reading = asyncio.create_task(self._read(reader))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                doc = orjson.loads(line)
                if "released" in doc:
                    self._released.put_nowait(str(doc["released"]))
                    continue
                answer = self._answers.get(int(doc.pop("id")))
                if answer is not None and not answer.done():
                    answer.set_result(doc)
        except (ConnectionError, orjson.JSONDecodeError):
            pass
        finally:
            broken = ConnectionResetError("the budget ledger's connection broke")
            for answer in self._answers.values():
                if not answer.done():
                    answer.set_exception(broken)
            self._released.put_nowait(None)
            if self._writer is not None:
                self._writer.close()
