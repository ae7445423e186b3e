"""Fixtures of the real servers, shared by the integration and end-to-end tiers.

Start one with `bash ops/kafka/kafka.sh start` and export the printed address:
EMBEDSTREAM_TEST_BOOTSTRAP=127.0.0.1:39092. Without it these tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import delete_topics, list_topics
from embedstream.testing.redis import RedisServer, redis_server_command
from embedstream.tools.local_postgres import PostgresServer, PostgresUnavailable, start_postgres

from tests.integration.broker import PrivateBroker
from tests.integration.secured import SecuredBroker, SecuredBrokerProcess


@pytest.fixture(scope="session")
def bootstrap() -> str:
    address = os.environ.get("EMBEDSTREAM_TEST_BOOTSTRAP", "")
    if not address and os.environ.get("EMBEDSTREAM_REQUIRE_BROKER") == "1":
        pytest.fail("EMBEDSTREAM_REQUIRE_BROKER=1 but EMBEDSTREAM_TEST_BOOTSTRAP is unset")
    if not address:
        pytest.skip("EMBEDSTREAM_TEST_BOOTSTRAP unset; run `bash ops/kafka/kafka.sh start`")
    return address


@pytest.fixture
async def unique_prefix(bootstrap: str) -> AsyncIterator[str]:
    """A topic prefix no other test uses; its topics are deleted afterwards."""
    prefix = f"test.{uuid.uuid4().hex[:12]}."
    yield prefix
    # The broker is shared and long-lived; do not let test topics pile up.
    await delete_topics(bootstrap, await list_topics(bootstrap, prefix))


@pytest.fixture
async def private_broker() -> AsyncIterator[PrivateBroker]:
    """A broker of the test's own, which it may stop, kill and restart."""
    if not os.environ.get("EMBEDSTREAM_TEST_BOOTSTRAP"):
        pytest.skip("integration tests need the Kafka jars and scripts; see ops/test.sh")
    broker = PrivateBroker()
    await broker.start()
    try:
        yield broker
    finally:
        await broker.remove()


@pytest.fixture
async def simulator() -> AsyncIterator[SimulatorServer]:
    """A simulated provider with default settings (for tests that need no faults)."""
    async with SimulatorServer() as server:
        yield server


@pytest.fixture(scope="session")
def secured_broker() -> Iterator[SecuredBroker]:
    """The SASL_SSL + SSL broker, started once per session (about 20 s)."""
    if not os.environ.get("EMBEDSTREAM_TEST_BOOTSTRAP"):
        pytest.skip("integration tests need the Kafka jars and scripts; see ops/test.sh")
    env_file = os.environ.get("EMBEDSTREAM_TEST_SECURED_ENV")
    if env_file:
        yield SecuredBroker.from_env_file(Path(env_file))
        return
    if shutil.which("openssl") is None:
        if os.environ.get("EMBEDSTREAM_REQUIRE_BROKER") == "1":
            pytest.fail("the secured broker needs the openssl command")
        pytest.skip("the secured broker needs the openssl command")
    process = SecuredBrokerProcess()
    try:
        yield process.start()
    finally:
        process.remove()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real `redis-server` of the test's own on a free loopback port, which it may stop and
    start again on the same port."""
    if redis_server_command() is None:
        if os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") == "1":
            pytest.fail("EMBEDSTREAM_REQUIRE_TOOLS=1 but redis-server is not installed")
        pytest.skip("redis-server not installed (Debian package redis-server; see ops/test.sh)")
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL with pgvector (the pgserver wheel) for the module's tests; skipped when
    the wheel cannot start one here."""
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    with server:
        yield server
