from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from embedstream.errors import ConfigError
from embedstream.ops.metrics import Metrics
from embedstream.ops.server import OpsServer, Readiness
from prometheus_client import CollectorRegistry

NOT_READY = Readiness(joined_group=True, broker_reachable=True, provider_usable=False)
READY = Readiness(joined_group=True, broker_reachable=True, provider_usable=True)


class Checks:
    """A readiness source the test can flip."""

    def __init__(self, state: Readiness) -> None:
        self.state = state

    def __call__(self) -> Readiness:
        return self.state


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


@pytest.fixture
def checks() -> Checks:
    return Checks(NOT_READY)


@pytest.fixture
async def server(metrics: Metrics, checks: Checks) -> AsyncIterator[OpsServer]:
    ops = OpsServer(metrics, checks)
    await ops.start(port=0)
    yield ops
    await ops.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def url(server: OpsServer, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def test_readiness_reasons() -> None:
    assert READY.ready and READY.reasons() == []
    nothing = Readiness(joined_group=False, broker_reachable=False, provider_usable=False)
    assert not nothing.ready
    assert nothing.reasons() == ["joined_group", "broker_reachable", "provider_usable"]


async def test_binds_loopback_by_default(server: OpsServer) -> None:
    assert server.host == "127.0.0.1"
    assert server.port > 0


async def test_metrics_endpoint(
    server: OpsServer, metrics: Metrics, http: aiohttp.ClientSession
) -> None:
    metrics.set_buffered_items(1234)
    async with http.get(url(server, "/metrics")) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    assert "# TYPE embedstream_flushes_total counter" in text
    assert "embedstream_buffered_items 1234.0" in text


async def test_healthz(server: OpsServer, http: aiohttp.ClientSession) -> None:
    async with http.get(url(server, "/healthz")) as response:
        assert response.status == 200
        assert await response.text() == "ok"


async def test_readyz_flips_with_readiness(
    server: OpsServer, metrics: Metrics, checks: Checks, http: aiohttp.ClientSession
) -> None:
    async with http.get(url(server, "/readyz")) as response:
        assert response.status == 503
        body = orjson.loads(await response.read())
    assert body["ready"] is False
    assert body["reasons"] == ["provider_usable"]
    assert body["messages"] == ["provider unusable"]
    assert body["checks"]["provider_usable"] is False
    assert metrics.registry.get_sample_value("embedstream_ready") == 0

    checks.state = READY
    async with http.get(url(server, "/readyz")) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        body = orjson.loads(await response.read())
    checks_ok = {
        "joined_group": True,
        "broker_reachable": True,
        "provider_usable": True,
        "registry_usable": True,
    }
    assert body == {"ready": True, "checks": checks_ok}
    assert metrics.registry.get_sample_value("embedstream_ready") == 1


async def test_stop_releases_port(metrics: Metrics, checks: Checks) -> None:
    ops = OpsServer(metrics, checks)
    await ops.start()
    await ops.stop()
    with pytest.raises(RuntimeError):
        _ = ops.port


async def test_a_taken_port_is_a_one_line_error_naming_metrics_port(
    metrics: Metrics, checks: Checks
) -> None:
    first = OpsServer(metrics, checks)
    await first.start()
    taken = first.port
    try:
        with pytest.raises(ConfigError) as caught:
            await OpsServer(metrics, checks).start(port=taken)
    finally:
        await first.stop()
    assert caught.value.setting == "metrics_port"
    assert f"cannot listen on 127.0.0.1:{taken}" in str(caught.value)


def test_readiness_says_the_registry_is_unavailable_and_why() -> None:
    down = Readiness(True, True, True, registry_usable=False, registry_problem="GET /x: 503")
    assert not down.ready
    assert down.reasons() == ["registry_usable"]
    assert down.messages() == ["schema registry unavailable: GET /x: 503"]
    assert "registry_problem" not in down.checks()
