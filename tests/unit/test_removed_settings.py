"""Settings that existed once are refused in one line saying what replaced each, from every
source (the environment, a --config file, a flag's override), rather than as unknown names;
and what replaced them does what they did."""

from __future__ import annotations

from pathlib import Path

import pytest
from embedstream.app.host import lane_children, supervises
from embedstream.core import configured
from embedstream.engine.cache_tiers import SIZING_ENTRY_BYTES, MemoryTier, memory_tier_entries
from embedstream.engine.formats import field_mapping
from embedstream.errors import ConfigError, env_var
from embedstream.settings import load_settings
from embedstream.settings.origins import REMOVED_SETTINGS
from embedstream.wire.field_mapping import FieldMapping

REPLACEMENTS = {
    "high_guard": "high_process",
    "high_target_ms": "high_process",
    "max_buffered_items": "max_buffered_bytes",
    "cache_max_items": "cache_max_bytes",
    "online_thread": "embedstream serve",
    "high_thread": "input_lanes",
    "id_field": "field_map=id=",
    "text_field": "field_map=text=",
    "doc_id_field": "field_map=doc_id=",
    "priority_field": "field_map=priority=",
    "concurrency_mode": "target_latency_ms",
}


@pytest.mark.parametrize("name", sorted(REMOVED_SETTINGS))
@pytest.mark.parametrize("source", ["env", "file", "overrides"])
def test_a_removed_setting_is_refused_naming_what_replaced_it(
    name: str, source: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        if source == "env":
            load_settings(env={env_var(name): "x"})
        elif source == "file":
            config = tmp_path / "settings.toml"
            config.write_text(f'{name} = "x"\n')
            load_settings(env={}, file=config)
        else:
            load_settings(env={}, overrides={name: "x"})
    assert caught.value.setting == name
    said = str(caught.value)
    assert "was removed;" in said and "\n" not in said
    assert REPLACEMENTS.get(name, "") in said


def test_field_map_names_the_id_text_document_and_priority_paths_as_the_old_settings_did() -> None:
    settings = load_settings(
        env={}, overrides={"field_map": "id=e.id,text=e.b.text,doc_id=d,priority=p,metadata=m"}
    )
    assert field_mapping(settings) == FieldMapping(
        id_field="e.id", text_field="e.b.text", doc_id_field="d", priority_field="p",
        optional={"metadata": "m"},
    )  # fmt: skip
    # unnamed, each is read from the top-level field of its own name, as before
    assert field_mapping(load_settings(env={})) == FieldMapping(
        id_field="id", text_field="text", doc_id_field="doc_id", priority_field=None, optional={}
    )


def test_a_field_map_naming_an_unknown_request_field_is_refused_naming_field_map() -> None:
    with pytest.raises(ConfigError) as caught:
        field_mapping(load_settings(env={}, overrides={"field_map": "colour=c"}))
    assert caught.value.setting == "field_map" and "colour" in str(caught.value)


@pytest.mark.parametrize(("target_ms", "adaptive"), [(0.0, False), (750.0, True)])
def test_target_latency_ms_above_0_makes_the_limit_adaptive_as_concurrency_mode_did(
    target_ms: float, adaptive: bool
) -> None:
    settings = load_settings(env={}, overrides={"target_latency_ms": target_ms})
    limit = configured.governor(settings, lambda: 0.0).limit
    assert limit.adaptive is adaptive
    assert limit.target_latency_s == (target_ms / 1000.0 or None)


def test_high_process_gives_the_high_lane_a_process_of_its_own_as_high_target_ms_was_meant_to() -> (
    None
):
    """high_target_ms and high_guard held low calls back to shorten the high lane's wait; with
    high_process the high topics are read, called and committed by a processor of their own."""
    settings = load_settings(env={}, overrides={"high_process": True})
    assert supervises(settings)
    children = lane_children(settings, {"high_process": True}, None, "redis://127.0.0.1:1/0")
    lanes = {c.name: c.args[c.args.index("--input-lanes") + 1] for c in children}
    assert lanes == {"high": "high", "bulk": "bulk"}
    assert all(c.command == "run" and "--no-high-process" in c.args for c in children)


@pytest.mark.parametrize(
    ("overrides", "items"),
    [
        ({}, 5_000),  # the defaults: what max_buffered_items defaulted to
        ({"max_buffered_bytes": 500 * 1024, "max_event_bytes": 4096}, 500),  # a small buffer
        ({"max_batch_size": 2048, "max_concurrency": 8}, 32_768),  # two full calls a slot
        ({"max_batch_size": 2048, "max_concurrency": 8, "max_buffered_bytes": 2**20}, 2048),
    ],
)
def test_the_item_bound_max_buffered_items_set_is_derived_from_the_bytes_and_the_batches(
    overrides: dict[str, int], items: int
) -> None:
    """What the fetcher, the online lane and the backfill bound their items by."""
    assert load_settings(env={}, overrides=overrides).buffered_items_limit == items


async def test_cache_max_bytes_bounds_the_entries_as_cache_max_items_did() -> None:
    """The count the refusal quotes is the default's, and a byte bound of n entries keeps n
    (small ones: the count binds) and evicts past them."""
    assert memory_tier_entries(load_settings(env={}).cache_max_bytes) == 10_319
    assert "(10,319 in 64 MiB)" in REMOVED_SETTINGS["cache_max_items"]
    settings = load_settings(env={}, overrides={"cache_max_bytes": 3 * SIZING_ENTRY_BYTES})
    tier = MemoryTier(settings.cache_ttl_s, max_bytes=settings.cache_max_bytes)  # build_cache's
    await tier.put_many([(f"k{i}", bytes(16)) for i in range(10)])
    assert len(tier) == 3 and tier.bytes_held < settings.cache_max_bytes / 10
