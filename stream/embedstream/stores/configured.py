"""The store's configuration as the settings give it (the store writer, migrations, and the
processors that follow a store's generations all build it here)."""

from __future__ import annotations

from embedstream.core import configured
from embedstream.core.intake import chunking_rules
from embedstream.settings import Settings
from embedstream.settings.rules import require_store
from embedstream.stores.pgschema import PgStoreConfig


def store_config(settings: Settings) -> PgStoreConfig:
    require_store(settings)
    assert settings.store_dsn is not None
    return PgStoreConfig(
        dsn=settings.store_dsn,
        schema=settings.store_schema,
        table=settings.store_table,
        dimensions=settings.store_dimensions,
        model=settings.store_model,
        chunking=chunking_rules(settings, configured.provider_limits(settings)),
        index=settings.store_index,
        connect_timeout_s=settings.connect_timeout_s,
    )
