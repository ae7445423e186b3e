"""Changing a store's index generation, one migration at a time: plan what a re-embed costs,
start the new generation, follow it, cut over to it in one transaction, roll back, drop the
old one or cancel the new one (``embedstream migrate``; the states are in
:mod:`embedstream.stores.generations`).

Every change of states takes the store's advisory lock alone, so it happens between two of the
writers' batches, and lasts one transaction. A cutover first builds the new generation's vector
index beside the writes (``CREATE INDEX CONCURRENTLY``: not during the filling, which it would
slow), then, in one transaction, checks that the new generation has caught up with every
document of the active one (its latest version, complete wherever the active one has it
complete), swaps the states and points the stable names at the new tables: a searcher sees
the old generation or the new one, never a mix, nothing or an error. Killed at any point,
it leaves the states and names of before or of after; an index build cut short is dropped and
made again by the next cutover.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from embedstream.core.generations import IndexGeneration
from embedstream.core.reembed import CallLimits, PlanTally, ReembedPlan, StoredChunk
from embedstream.errors import EmbedStreamError, Reason, StoreError
from embedstream.stores import pgregistry as reg
from embedstream.stores import pgschema as sql
from embedstream.stores.generations import Registry, StoredGeneration, chunking_json
from embedstream.stores.pgdriver import jsonb
from embedstream.stores.pgvector import PgVectorStore

LOCK_TIMEOUT_S = 10.0
SHOWN_DOCUMENTS = 10  # documents named in a refused cutover


class MigrationRefused(EmbedStreamError):
    """A migration command that does not apply to the store as it is (one line says why)."""


@dataclass(frozen=True, slots=True)
class GenerationStatus:
    generation: StoredGeneration
    documents: int = 0
    complete: int = 0  # documents whose latest version is complete
    chunks: int = 0
    requests: int = 0
    tokens: int = 0  # the provider tokens of the vectors it holds (0 for cached ones)
    estimated: int = 0  # its chunks' tokens estimated as a plan estimates them
    lacking: int | None = None  # not the active one: documents not caught up with the active
    extra: int | None = None  # ... documents it has that the active one does not
    index: str = "none"  # none, valid, invalid (a build cut short), or absent


@dataclass(frozen=True, slots=True)
class Differences:
    lacking: int
    extra: int
    lacking_ids: list[str]
    extra_ids: list[str]

    def __bool__(self) -> bool:
        return bool(self.lacking or self.extra)

    def said(self) -> str:
        parts = []
        if self.lacking:
            more = ", ..." if self.lacking > len(self.lacking_ids) else ""
            parts.append(f"{self.lacking} not caught up with the active generation "
                         f"({', '.join(self.lacking_ids)}{more})")  # fmt: skip
        if self.extra:
            more = ", ..." if self.extra > len(self.extra_ids) else ""
            parts.append(f"{self.extra} deleted from the active generation "
                         f"({', '.join(self.extra_ids)}{more})")  # fmt: skip
        return "; ".join(parts)


class Migrations:
    """The migration commands on one opened store; ``index`` is the vector index a cutover
    builds (the store's ``store_index``)."""

    def __init__(
        self,
        store: PgVectorStore,
        index: str,
        ivfflat_lists: int = 100,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
    ) -> None:
        self._store = store
        self._lock_timeout_s = lock_timeout_s
        self._session = store.session
        self._names = store.names
        self._index = index
        self._lists = ivfflat_lists

    async def plan(
        self, target: IndexGeneration, limits: CallLimits
    ) -> tuple[StoredGeneration, ReembedPlan]:
        """The active generation, and what re-embedding its documents for ``target`` costs."""
        async with self._session.transaction("read the store for a plan"):
            registry = await self._store.load()
            active = _usable_active(registry)
            tables = self._names.of(active.id)
            same = target.chunking == active.generation.chunking
            texts = bool((await self._session.fetchone(reg.text_kept(tables)) or (False,))[0])
            tally = PlanTally(target.chunking, same_chunking=same, texts=texts)
            with_text = texts and not same
            rows: list[StoredChunk] = []
            current: str | None = None
            async for doc_id, count, start, end, size, text in self._session.stream(
                reg.current_chunks(tables, with_text=with_text)
            ):
                if doc_id != current:
                    if current is not None:
                        tally.add(rows)
                    current, rows = doc_id, []
                if count is not None:
                    rows.append(StoredChunk(count, (start, end), size, text))
            if current is not None:
                tally.add(rows)
            counted = await self._session.fetchone(f"SELECT count(*) FROM {tables.requests}")
        return active, tally.plan(limits, int(counted[0]) if counted else 0)

    async def start(
        self, target: IndexGeneration, limits: CallLimits, via: str = "sync"
    ) -> tuple[StoredGeneration, ReembedPlan]:
        """Register ``target`` as the new generation (its tables now if its dimensions are
        asked, else at its first vector; no vector index until the cutover); ``via``: how its
        backfill embeds ("sync" calls, "batch" jobs), kept with its plan for the processors."""
        _, plan = await self.plan(target, limits)
        async with self._alone("start a generation") as registry:
            active = _usable_active(registry)
            if (new := registry.in_state("new")) is not None:
                raise MigrationRefused(
                    f"generation {new.id} is being filled already ({new.said}): "
                    "cut over to it or cancel it first"
                )
            if (old := registry.in_state("old")) is not None:
                raise MigrationRefused(
                    f"generation {old.id} is kept from the last cutover: drop it (or roll back "
                    "to it) before starting another"
                )
            if target.id in (active.id, active.alias):
                raise MigrationRefused(
                    f"the active generation {active.id} is that one already ({active.said})"
                )
            await self._session.execute(
                reg.insert_generation(self._names),
                (target.id, target.model, target.dimensions, None,
                 jsonb(chunking_json(target.chunking)), "new",
                 jsonb({**plan.as_json(), "via": via}), False),
            )  # fmt: skip
            await self._store.load()
            started = self._store.registry.get(target.id)
            assert started is not None
            if target.dimensions is not None:
                started = await self._store.make_tables(started, target.dimensions)
        return started, plan

    async def status(self) -> list[GenerationStatus]:
        async with self._session.transaction("read the generations"):
            registry = await self._store.load()
            active = registry.active
            found = []
            for g in registry.generations:
                if g.size is None:
                    found.append(GenerationStatus(g))
                    continue
                tables = self._names.of(g.id)
                row = await self._session.fetchone(reg.counts(tables))
                assert row is not None
                differences = None
                if active is not None and active.size is not None and g is not active:
                    differences = await self._differences(active, g)
                documents, complete, chunks, requests, tokens, estimated = (int(v) for v in row)
                found.append(
                    GenerationStatus(
                        g,
                        documents,
                        complete,
                        chunks,
                        requests,
                        tokens,
                        estimated,
                        lacking=None if differences is None else differences.lacking,
                        extra=None if differences is None else differences.extra,
                        index=await self._index_state(g),
                    )
                )
        return found

    async def lacking_documents(self) -> list[str]:
        """Every document the new generation lacks, in doc_id order (none without a new
        generation with vectors)."""
        async with self._session.transaction("read the documents lacking"):
            registry = await self._store.load()
            new, active = registry.in_state("new"), registry.active
            if new is None or new.size is None or active is None or active.size is None:
                return []
            lacking = reg.lacking_documents(self._names.of(active.id), self._names.of(new.id))
            return [row[0] async for row in self._session.stream(f"{lacking} ORDER BY 1")]

    async def cutover(self, *, allow_missing: bool) -> tuple[StoredGeneration, Differences]:
        """The new generation becomes the active one; returns it and the documents it lacked
        (only with ``allow_missing``: otherwise they refuse the cutover)."""
        async with self._session.transaction("read the generations"):
            registry = await self._store.load()
            new, active = registry.in_state("new"), registry.active
            if new is None:
                raise MigrationRefused("no generation to cut over to: `embedstream migrate start`")
            if new.size is None:
                raise MigrationRefused(f"generation {new.id} has no vectors yet: fill it first")
            if active is not None and active.size is not None:  # no index while it fills
                _refuse_lacking(new, await self._differences(active, new), allow_missing)
        await self._build_index(new)
        await self._branches(g for g in registry.generations if g.size is not None)
        async with self._alone("cut over") as registry:
            now_new, active = registry.in_state("new"), _usable_active(registry)
            if now_new is None or now_new.id != new.id:
                raise MigrationRefused(f"generation {new.id} is no longer the new one")
            differences = await self._differences(active, new)
            _refuse_lacking(new, differences, allow_missing)
            await self._set_state(active, "old")
            await self._set_state(new, "active")
            await self._session.execute(reg.point_chunks(self._names, self._names.of(new.id)))
            await self._session.execute(sql.clear_live(self._names.of(new.id)))
        return new, differences

    async def rollback(self) -> StoredGeneration:
        """The generation kept from the last cutover becomes the active one again; the one it
        replaced becomes the new one (cut over to it again, or cancel it)."""
        async with self._alone("roll back") as registry:
            old, active = registry.in_state("old"), _usable_active(registry)
            if old is None:
                raise MigrationRefused("no generation kept to roll back to")
            await self._set_state(active, "new")
            await self._set_state(old, "active")
            await self._session.execute(reg.point_chunks(self._names, self._names.of(old.id)))
        return old

    async def drop(self) -> StoredGeneration:
        """Drop the generation kept from the last cutover (no rollback after this)."""
        return await self._forget("old", "no generation kept from a cutover to drop")

    async def cancel(self) -> StoredGeneration:
        """Drop the new generation (never active, or rolled back from)."""
        return await self._forget("new", "no new generation to cancel")

    # -- parts ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _alone(self, doing: str) -> AsyncIterator[Registry]:
        """A transaction holding the store alone (no batch written meanwhile), and the
        registry as it is then; a lock not granted in time changes nothing."""
        try:
            async with self._session.transaction(doing):
                await self._session.execute(reg.lock_timeout(self._lock_timeout_s))
                await self._store.lock_alone()
                yield await self._store.load()
        except StoreError as exc:
            raise _busy(exc, self._lock_timeout_s) from None

    async def _set_state(self, generation: StoredGeneration, state: str) -> None:
        await self._session.execute(
            reg.set_state(self._names), (state, state == "active", generation.id)
        )

    async def _branches(self, generations: Iterable[StoredGeneration]) -> None:
        """The documents and requests views with a branch per generation given, each view in a
        transaction of its own (see :mod:`embedstream.stores.pgregistry`)."""
        tables = [self._names.of(g.id) for g in generations]
        for statement in reg.branch_views(self._names, tables):
            try:
                async with self._session.transaction("replace a view"):
                    await self._session.execute(reg.lock_timeout(self._lock_timeout_s))
                    await self._session.execute(statement)
            except StoreError as exc:
                raise _busy(exc, self._lock_timeout_s) from None

    async def _forget(self, state: str, nothing: str) -> StoredGeneration:
        async with self._session.transaction("read the generations"):
            registry = await self._store.load()
        going = registry.in_state(state)  # type: ignore[arg-type]
        if going is None:
            raise MigrationRefused(nothing)
        await self._branches(g for g in registry.generations if g.size and g.id != going.id)
        async with self._alone(f"drop a generation ({state})") as registry:
            found = registry.in_state(state)  # type: ignore[arg-type]
            if found is None or found.id != going.id:
                raise MigrationRefused(nothing)
            for statement in reg.drop_tables(self._names.of(found.id)):
                await self._session.execute(statement)
            await self._session.execute(reg.forget_generation(self._names), (found.id,))
        return found

    async def _differences(self, active: StoredGeneration, other: StoredGeneration) -> Differences:
        row = await self._session.fetchone(
            reg.missing_documents(self._names.of(active.id), self._names.of(other.id)),
            (SHOWN_DOCUMENTS, SHOWN_DOCUMENTS),
        )
        assert row is not None
        return Differences(int(row[0]), int(row[1]), list(row[2]), list(row[3]))

    async def _index_state(self, generation: StoredGeneration) -> str:
        row = await self._session.fetchone(reg.index_state(self._names.of(generation.id)))
        if row is None:
            return "absent"
        return "valid" if row[0] else "invalid"

    async def _build_index(self, generation: StoredGeneration) -> None:
        tables = self._names.of(generation.id)
        build = sql.create_index(tables, self._index, self._lists, concurrently=True)
        if build is None:
            return
        async with self._session.errors("build the vector index"):
            await self._session.connect()
            if await self._index_state(generation) == "invalid":  # a build cut short
                await self._session.execute(reg.drop_index(tables))
            await self._session.execute(build)


def _refuse_lacking(new: StoredGeneration, differences: Differences, allow_missing: bool) -> None:
    if differences and not allow_missing:
        raise MigrationRefused(
            f"generation {new.id} lacks {differences.said()}: wait for it to catch up "
            "(`embedstream migrate status` says which of them the backfill's source lacks), "
            "or cut over with --allow-missing"
        )


def _usable_active(registry: Registry) -> StoredGeneration:
    active = registry.active
    if active is None or active.size is None:
        raise MigrationRefused(
            "the store has no vectors yet: nothing to migrate (start the store writer with the "
            "settings of the generation you want)"
        )
    return active


def _busy(exc: StoreError, waited_s: float) -> StoreError:
    if exc.reason != Reason.STORE_LOCKED:
        return exc
    return StoreError(
        Reason.STORE_LOCKED,
        f"a writer or a reader held the store for more than {waited_s:g} s; nothing "
        "changed: try again",
    )
