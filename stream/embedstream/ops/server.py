"""Operations HTTP server: Prometheus scrape, liveness and readiness.

Routes:
    GET /metrics   text exposition of the processor's own registry
    GET /healthz   200 "ok" while the process runs (liveness says nothing about Kafka)
    GET /readyz    200 with the checks when ready, 503 with the failing checks when not

Binds 127.0.0.1 unless told otherwise: metrics and readiness are not for the open network.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from typing import Protocol

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from embedstream.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"


# What /readyz says of each failing check, for the person reading it.
_MESSAGES = {
    "joined_group": "not a member of the consumer group yet",
    "broker_reachable": "broker unreachable",
    "provider_usable": "provider unusable",
    "registry_usable": "schema registry unavailable",
}


@dataclass(frozen=True, slots=True)
class Readiness:
    """Snapshot of the checks that must all pass before the processor counts as ready."""

    joined_group: bool
    broker_reachable: bool
    provider_usable: bool
    registry_usable: bool = True  # a JSON-only processor asks no registry
    # The registry's last error while it is unusable: not a check, the detail of one.
    registry_problem: str | None = field(default=None, metadata={"check": False})

    @property
    def ready(self) -> bool:
        return not self.reasons()

    def checks(self) -> dict[str, bool]:
        return {
            f.name: bool(getattr(self, f.name))
            for f in fields(self)
            if f.metadata.get("check", True)
        }

    def reasons(self) -> list[str]:
        """Names of the checks that fail, in declaration order."""
        return [name for name, ok in self.checks().items() if not ok]

    def messages(self) -> list[str]:
        """The failing checks in words (the registry's with its last error)."""
        said = []
        for name in self.reasons():
            message = _MESSAGES.get(name, name)
            if name == "registry_usable" and self.registry_problem:
                message += f": {self.registry_problem}"
            said.append(message)
        return said

    def details(self) -> dict[str, str]:
        if self.registry_problem is None:
            return {}
        return {"registry_usable": self.registry_problem}


@dataclass(frozen=True, slots=True)
class StoreReadiness:
    """The store writer's checks; ``store_problem`` says why the store cannot be written."""

    joined_group: bool
    broker_reachable: bool
    store_problem: str | None

    @property
    def ready(self) -> bool:
        return not self.reasons()

    def reasons(self) -> list[str]:
        failing = [name for name, ok in self.checks().items() if not ok]
        return failing

    def checks(self) -> dict[str, bool]:
        return {
            "joined_group": self.joined_group,
            "broker_reachable": self.broker_reachable,
            "store_writable": self.store_problem is None,
        }

    def details(self) -> dict[str, str]:
        return {} if self.store_problem is None else {"store_writable": self.store_problem}

    def messages(self) -> list[str]:
        """The failing checks in words (the store's with its error)."""
        said = [_MESSAGES.get(name, name) for name in self.reasons() if name != "store_writable"]
        if self.store_problem is not None:
            said.append(f"store not writable: {self.store_problem}")
        return said


class ReadinessReport(Protocol):
    """What /readyz shows: Readiness (a processor) or StoreReadiness (a store writer)."""

    @property
    def ready(self) -> bool: ...
    def reasons(self) -> list[str]: ...
    def checks(self) -> dict[str, bool]: ...
    def details(self) -> dict[str, str]: ...
    def messages(self) -> list[str]: ...


class Exposed(Protocol):
    """The metrics an ops server serves: ops.metrics.Metrics or ops.store_metrics.StoreMetrics."""

    @property
    def registry(self) -> CollectorRegistry: ...
    def set_ready(self, ready: bool) -> None: ...


class OpsServer:
    """Serves ``metrics`` and the ``readiness`` callable (asked afresh on every /readyz; it
    may answer later, as the supervisor of lane processes asks them). ``before_scrape``
    runs before each /metrics (the supervisor fetches its children's then)."""

    def __init__(
        self,
        metrics: Exposed,
        readiness: Callable[[], ReadinessReport | Awaitable[ReadinessReport]],
        before_scrape: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._metrics = metrics
        self._readiness = readiness
        self._before_scrape = before_scrape
        self._runner: web.AppRunner | None = None
        self._address: tuple[str, int] | None = None

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._handle_metrics)
        app.router.add_get("/healthz", self._handle_healthz)
        app.router.add_get("/readyz", self._handle_readyz)
        return app

    async def start(self, host: str = DEFAULT_HOST, port: int = 0) -> None:
        """Listen on ``host:port``; port 0 picks a free port (see :attr:`port`)."""
        if self._runner is not None:
            raise RuntimeError("ops server already started")
        runner = web.AppRunner(self.make_app(), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:  # the port is taken, the address is not ours: one line
            await runner.cleanup()
            raise ConfigError(
                "metrics_port", f"cannot listen on {host}:{port}: {exc.strerror}"
            ) from None
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound_host, bound_port = runner.addresses[0][:2]
        self._address = (str(bound_host), int(bound_port))

    async def stop(self) -> None:
        runner, self._runner, self._address = self._runner, None, None
        if runner is not None:
            await runner.cleanup()

    @property
    def host(self) -> str:
        """The address actually bound."""
        return self._bound()[0]

    @property
    def port(self) -> int:
        """The port actually bound (useful after ``start(port=0)``)."""
        return self._bound()[1]

    def _bound(self) -> tuple[str, int]:
        if self._address is None:
            raise RuntimeError("ops server not started")
        return self._address

    async def _handle_metrics(self, request: web.Request) -> web.Response:
        if self._before_scrape is not None:
            await self._before_scrape()
        # CONTENT_TYPE_LATEST carries a charset, which aiohttp's content_type= rejects.
        return web.Response(
            body=generate_latest(self._metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def _handle_healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _handle_readyz(self, request: web.Request) -> web.Response:
        asked = self._readiness()
        readiness = await asked if inspect.isawaitable(asked) else asked
        self._metrics.set_ready(readiness.ready)
        body: dict[str, object] = {"ready": readiness.ready, "checks": readiness.checks()}
        if not readiness.ready:
            body["reasons"] = readiness.reasons()
            body["messages"] = readiness.messages()
        if readiness.details():  # why a check fails, in words (the store's error)
            body["details"] = readiness.details()
        return web.Response(
            body=orjson.dumps(body),
            status=200 if readiness.ready else 503,
            content_type="application/json",
        )
