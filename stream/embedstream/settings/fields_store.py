"""Settings of the store writer (`embedstream sink`): where the vectors go and how it reads."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import Group, StoreIndex, setting

_ST = Group.STORE


@dataclass(frozen=True)
class StoreFields:
    store_dsn: str | None = setting(
        None,
        "PostgreSQL to write to: postgresql://user:password@host:5432/db or key=value "
        "conninfo (or EMBEDSTREAM_STORE_DSN_FILE). Needed by `embedstream sink`. Never logged.",
        _ST,
        secret=True,
    )
    store_schema: str = setting("public", "Schema of the store's tables (must exist).", _ST)
    store_table: str = setting(
        "embeddings",
        "Chunk table; its companions are <table>_documents, _requests and _meta. A "
        "lower-case SQL identifier of at most 48 characters.",
        _ST,
    )
    store_dimensions: int | None = setting(
        None,
        "Vector size of the store's first generation; unset: its first vector decides (`sink "
        "init` needs it). A result of another size is dead-lettered.",
        _ST,
        ge=1,
        le=16_000,
    )
    store_model: str | None = setting(
        None,
        "Model of the store's first generation (the processors' model), made when the store "
        "has none; `embedstream sink` needs it. Later generations come from `embedstream "
        "migrate`; results of a generation the store does not know are dead-lettered.",
        _ST,
    )
    store_index: StoreIndex = setting(
        "none",
        "Vector index made with the table: none (exact scan: fastest writes, fine to about "
        "100k rows), hnsw (fast approximate search; writes drop to a few hundred rows/s on a "
        "small machine) or ivfflat (build it once the table is filled).",
        _ST,
    )
    store_group_id: str = setting(
        "embedstream-sink",
        "Consumer group of the store writers (their own, apart from the processors').",
        _ST,
    )
    store_batch_max: int = setting(
        1_000,
        "Most result records written in one store transaction (one fetch).",
        _ST,
        gt=0,
        le=100_000,
    )
