"""One host's lane processes seen as one: their /metrics merged into the supervisor's, and
their /readyz into its own, so a scraper, a probe and `embedstream top` see one endpoint.

Each child's families keep their names and gain a ``process`` label (online, processor, high,
bulk), so nothing is summed away and a dashboard's ``sum by`` still adds them up. The children's
``embedstream_ready`` is left out: the supervisor's own is the host's (every child ready).
Fetched when asked (a scrape, a probe), never on a timer: an idle host spends nothing on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

FETCH_TIMEOUT_S = 2.0
OWN_FAMILIES = frozenset({"embedstream_ready"})  # the supervisor's, not a child's


@dataclass(slots=True)
class ChildEndpoint:
    """Where a lane process serves its metrics and readiness (127.0.0.1, its metrics port,
    which each start of the process may change)."""

    name: str
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True, slots=True)
class ChildReadiness:
    name: str
    ready: bool
    messages: tuple[str, ...]


class HostReadiness:
    """/readyz of the host: ready when every lane process is; each one is a check."""

    def __init__(self, children: Sequence[ChildReadiness]) -> None:
        self._children = list(children)

    @property
    def ready(self) -> bool:
        return all(c.ready for c in self._children)

    def checks(self) -> dict[str, bool]:
        return {c.name: c.ready for c in self._children}

    def reasons(self) -> list[str]:
        return [c.name for c in self._children if not c.ready]

    def messages(self) -> list[str]:
        return [
            f"{c.name}: {'; '.join(c.messages) or 'not ready'}"
            for c in self._children
            if not c.ready
        ]

    def details(self) -> dict[str, str]:
        return {}


class GatheredChildren:
    """Fetches the children's endpoints and holds what the last fetch found."""

    def __init__(self, children: Sequence[ChildEndpoint]) -> None:
        self.children = list(children)
        self._expositions: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None

    async def readiness(self) -> HostReadiness:
        found = await asyncio.gather(*(self._ready(child) for child in self.children))
        return HostReadiness(found)

    async def refresh_metrics(self) -> None:
        texts = await asyncio.gather(*(self._text(c, "/metrics") for c in self.children))
        self._expositions = {c.name: t for c, t in zip(self.children, texts, strict=True) if t}

    def collect(self) -> Iterable[Metric]:
        """The children's families as the last refresh found them (a prometheus_client
        collector: register it on the supervisor's registry)."""
        merged: dict[str, Metric] = {}
        for name, text in self._expositions.items():
            for family in text_string_to_metric_families(text):
                if family.name in OWN_FAMILIES:
                    continue
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                into.samples += [_labelled(sample, name) for sample in family.samples]
        return list(merged.values())

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _ready(self, child: ChildEndpoint) -> ChildReadiness:
        session = self._client()
        try:
            async with session.get(child.base + "/readyz") as answer:
                body = await answer.json(content_type=None)
                said = body.get("messages", []) if isinstance(body, Mapping) else []
                return ChildReadiness(child.name, answer.status == 200, tuple(map(str, said)))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return ChildReadiness(child.name, False, (f"not answering ({type(exc).__name__})",))

    async def _text(self, child: ChildEndpoint, path: str) -> str | None:
        try:
            async with self._client().get(child.base + path) as answer:
                return await answer.text() if answer.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session


def _labelled(sample: Sample, process: str) -> Sample:
    return sample._replace(labels={**sample.labels, "process": process})


HOST_METRIC_NAMES: frozenset[str] = frozenset(
    {"embedstream_lane_process_up", "embedstream_lane_process_restarts_total"}
)


class HostMetrics:
    """The supervisor's registry: its own readiness and lane processes, and (through
    ``children``) every child's families."""

    def __init__(self, children: GatheredChildren, names: Sequence[str]) -> None:
        self.registry = CollectorRegistry()
        self._ready = Gauge(
            "embedstream_ready", "1 when ready to serve, else 0.", registry=self.registry
        )
        self._up = Gauge(
            "embedstream_lane_process_up",
            "1 while the lane process runs (embedstream run's children), 0 while restarting.",
            ["process"],
            registry=self.registry,
        )
        self._restarts = Counter(
            "embedstream_lane_process_restarts",
            "Times a lane process was started again after it crashed.",
            ["process"],
            registry=self.registry,
        )
        for name in names:
            self._up.labels(name)
            self._restarts.labels(name)
        self.registry.register(children)

    def set_ready(self, ready: bool) -> None:
        self._ready.set(1 if ready else 0)

    def set_up(self, process: str, up: bool) -> None:
        self._up.labels(process).set(1 if up else 0)

    def count_restart(self, process: str) -> None:
        self._restarts.labels(process).inc()
