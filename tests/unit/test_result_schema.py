"""Registering the result schema at start: a registry outage is waited out (holds that double,
`outage` set for `/readyz`), a refusal is a bad setting, a stop ends the wait."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from embedstream.core.holdback import HoldBacks
from embedstream.engine.registry import RegistryClient, RegistryConfig
from embedstream.engine.result_schema import ResultSchemaRegistration
from embedstream.errors import ConfigError, RegistryUnavailable
from embedstream.settings import Settings, load_settings
from embedstream.testing.registry import TestRegistry
from embedstream.testing.waiting import eventually
from embedstream.wire.formats.output_schemas import RESULT, output_schema
from embedstream.wire.registry_frames import parse_frame

from tests.unit.test_registry_client import kit_result

REGISTER = f"POST /subjects/embed.results-{RESULT}/versions"


@pytest.fixture
async def registry() -> AsyncIterator[TestRegistry]:
    async with TestRegistry() as server:
        yield server


def avro_results(registry: TestRegistry) -> Settings:
    return load_settings(
        env={}, overrides={"output_format": "avro", "schema_registry_url": registry.url}
    )


def registration(
    registry: TestRegistry, client: RegistryClient, settings: Settings | None = None
) -> ResultSchemaRegistration:
    return ResultSchemaRegistration(
        settings or avro_results(registry),
        client,
        "embed.results",
        holds=HoldBacks(first_s=0.01, max_s=0.04),
    )


async def test_an_outage_at_start_is_waited_out_then_the_schema_is_registered(
    registry: TestRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    registry.answer_status = 503
    async with RegistryClient(RegistryConfig(registry.url)) as client:
        start = registration(registry, client)
        task = asyncio.create_task(start.encoder(asyncio.Event()))
        await eventually(lambda: registry.paths.count(REGISTER) >= 4 or task.done())
        assert not task.done()
        assert isinstance(start.outage, RegistryUnavailable)
        assert "503" in str(start.outage)
        registry.answer_status = None
        encoder = await asyncio.wait_for(task, 5)
    assert encoder is not None and start.outage is None
    registered = registry.register(f"embed.results-{RESULT}", output_schema("avro", RESULT)[1])
    assert parse_frame(encoder.encode(kit_result())).schema_id == registered
    waits = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(waits) >= 3 and all("schema registry unavailable at start" in w for w in waits)


async def test_a_stop_while_waiting_ends_the_wait_with_no_encoder(registry: TestRegistry) -> None:
    await registry.refuse()  # nothing listens: connection refused
    stopping = asyncio.Event()
    async with RegistryClient(RegistryConfig(registry.url)) as client:
        start = ResultSchemaRegistration(
            avro_results(registry), client, "embed.results", holds=HoldBacks(60.0, 60.0)
        )
        task = asyncio.create_task(start.encoder(stopping))
        await eventually(lambda: start.outage is not None or task.done())
        stopping.set()  # the hold is a minute: the stop must not wait for it
        assert await asyncio.wait_for(task, 20) is None
    assert start.outage is not None


async def test_a_refusal_is_a_bad_setting_not_an_outage(registry: TestRegistry) -> None:
    registry.answer_status = 409
    async with RegistryClient(RegistryConfig(registry.url)) as client:
        with pytest.raises(ConfigError) as caught:
            await registration(registry, client).encoder(asyncio.Event())
    assert "output_format" in str(caught.value) and "refused" in str(caught.value)
    assert registry.paths == [REGISTER]


async def test_json_results_ask_the_registry_nothing(registry: TestRegistry) -> None:
    settings = load_settings(
        env={}, overrides={"input_format": "avro", "schema_registry_url": registry.url}
    )
    async with RegistryClient(RegistryConfig(registry.url)) as client:
        assert await registration(registry, client, settings).encoder(asyncio.Event()) is None
    assert registry.paths == []
