"""The operations files match what a running processor exports.

(a) Every metric the Grafana dashboard and the alert rules query is exported, with samples, by a
    processor that has handled results, a retry and dead letters.
(b) A real Prometheus scrapes that processor: PromQL sees exactly the results the test produced,
    readiness 1, the alert rules evaluate without errors and every dashboard query is valid.

(b) needs the `prometheus` binary (Debian/Ubuntu package `prometheus`); without it that test is
skipped, unless EMBEDSTREAM_REQUIRE_TOOLS=1, where it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest
import yaml
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.errors import env_var
from embedstream.kafka.client.admin import topic_names
from embedstream.ops.metrics import PROCESSOR_METRIC_NAMES
from embedstream.ops.store_metrics import STORE_METRIC_NAMES
from embedstream.settings import Settings
from embedstream.testing import eventually
from embedstream.tools.embedded import free_port
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import (
    create_all_topics,
    publish,
    request,
    settings_for,
    wait_for_ids,
)

# The store writer's own panels and rules are its process's (tests/integration/test_store_feed.py).
STORE_WRITER_ONLY = STORE_METRIC_NAMES - PROCESSOR_METRIC_NAMES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STREAM = ROOT / "stream"
DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "embedstream.json"
ALERT_RULES = ROOT / "ops" / "prometheus" / "alerts.yml"

N_HIGH = 100
N_LOW = 200
FLAKY = "FLAKY"  # texts the simulator fails once (HTTP 500): exercises retries and API errors
BAD_EVENTS: list[tuple[bytes | None, bytes]] = [
    (b"bad-json-1", b'{"id": "x", "text": '),
    (b"bad-json-2", b"not json at all"),
    (b"bad-empty-1", orjson.dumps({"id": "bad-empty-1", "text": "   "})),
]
WAIT_S = 90.0
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)

_METRIC = re.compile(r"\bembedstream_[a-z_]+")
_SERIES_SUFFIX = re.compile(r"_(bucket|sum|count)$")

T = TypeVar("T")


# --------------------------------------------------------------------------- the files' queries


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and template variables."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries: list[str] = []
    panels: list[dict[str, Any]] = list(dashboard["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        queries.extend(str(t["expr"]) for t in panel.get("targets", []) if t.get("expr"))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("definition"):
            queries.append(str(variable["definition"]))
    return queries


def rule_queries() -> list[str]:
    groups = yaml.safe_load(ALERT_RULES.read_text(encoding="utf-8"))["groups"]
    return [str(rule["expr"]) for group in groups for rule in group["rules"]]


def metric_names(queries: list[str]) -> set[str]:
    """embedstream_* families named in queries, histogram series mapped to their family."""
    return {_SERIES_SUFFIX.sub("", name) for q in queries for name in _METRIC.findall(q)}


_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*([a-zA-Z_]+)\)$")


def as_instant_query(query: str) -> str:
    """A dashboard query as plain PromQL for /api/v1/query: Grafana's variables replaced, and
    its `label_values(metric, label)` as the equivalent `group by (label) (metric)`."""
    query = _LABEL_VALUES.sub(r"group by (\2) (\1)", query.strip())
    return query.replace("$__rate_interval", "1m").replace("$instance", ".*")


# --------------------------------------------------------------------------- helpers


async def last_sample_when(
    probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout_s: float = WAIT_S
) -> T:
    """Call `probe` until `done(result)` or the deadline; returns the last result either way."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()
        if done(result) or time.monotonic() >= deadline:
            return result
        await asyncio.sleep(0.5)


async def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The processor's /metrics as {sample name: [(labels, value)]}; families without samples
    appear under their name with an empty list."""
    async with (
        aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        text = await response.text()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        samples.setdefault(family.name, [])
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(value for _, value in samples.get(name, []))


def with_samples(samples: dict[str, list[tuple[dict[str, str], float]]]) -> set[str]:
    return {_SERIES_SUFFIX.sub("", name) for name, values in samples.items() if values}


def texts() -> tuple[dict[str, str], dict[str, str]]:
    """(high, low) requests by id; two low texts fail once at the provider."""
    high = {f"h-{i}": f"interactive query number {i}" for i in range(N_HIGH)}
    low = {f"l-{i}": f"bulk document {i} " + "word " * (i % 40) for i in range(N_LOW)}
    low["l-0"] = f"{FLAKY} first flaky document"
    low["l-1"] = f"{FLAKY} second flaky document"
    return high, low


@contextlib.asynccontextmanager
async def processor_with_simulator(bootstrap: str, prefix: str) -> AsyncIterator[Settings]:
    """`embedstream run` with the online lane on, as users run it: its lane processes (`serve`
    and a processor) behind one /metrics, so every family a deployment exports is there."""
    simulator_config = SimulatorConfig(base_ms=2, fail_texts_containing=FLAKY, fail_times=1)
    async with SimulatorServer(simulator_config) as simulator:
        settings = settings_for(
            bootstrap,
            prefix,
            simulator.url,
            metrics_port=free_port(),
            max_batch_size=32,
            retry_backoff_base_ms=100,
            retry_backoff_cap_ms=500,
            # Each flaky text fails once, and an innocent item shares a batch with at most both.
            max_attempts=10,
            http_port=free_port(),  # the online lane's metrics too
        )
        await create_all_topics(settings)
        names = ("bootstrap_servers", "topic_prefix", "group_id", "base_url", "metrics_port",
                 "max_batch_size", "retry_backoff_base_ms", "retry_backoff_cap_ms",
                 "max_attempts", "http_port", "fetch_max_wait_ms", "max_wait_ms",
                 "commit_interval_ms")  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
        env.update({env_var(n): str(getattr(settings, n)) for n in names})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STREAM), env.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", "run", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await eventually(lambda: _ready(settings.metrics_port), timeout_s=60, poll_s=0.2)
            yield settings
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)


async def _ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
            session.get(f"http://127.0.0.1:{port}/readyz") as response,
        ):
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def push_traffic(bootstrap: str, settings: Settings) -> int:
    """Publish the requests and the bad events; returns how many results must appear."""
    names = topic_names(settings.topic_prefix)
    high, low = texts()
    await publish(bootstrap, names.requests_high, [request(i, t) for i, t in high.items()])
    await publish(bootstrap, names.requests_low, [request(i, t) for i, t in low.items()])
    await publish(bootstrap, names.requests_low, BAD_EVENTS)
    ids = set(high) | set(low)
    url = f"http://127.0.0.1:{settings.http_port}/v1/embeddings"
    async with aiohttp.ClientSession() as session, session.post(url, json={"input": "q"}) as answer:
        assert answer.status == 200  # an online caller beside the Kafka lanes
    seen = await wait_for_ids(bootstrap, names.results, ids, timeout_s=WAIT_S)
    assert ids <= set(seen), f"{len(ids - set(seen))} requests got no result"
    return len(ids)


# --------------------------------------------------------------------------- (a) /metrics


def test_the_files_query_known_metrics() -> None:
    dashboard = metric_names(dashboard_queries())
    rules = metric_names(rule_queries())
    assert len(dashboard) >= 15 and len(rules) >= 8
    assert "embedstream_ready" in rules and "embedstream_item_wait_seconds" in rules


async def test_processor_exports_every_metric_the_dashboard_and_alerts_use(
    bootstrap: str, unique_prefix: str
) -> None:
    used = metric_names(dashboard_queries()) | metric_names(rule_queries())
    used -= STORE_WRITER_ONLY
    async with processor_with_simulator(bootstrap, unique_prefix) as settings:
        expected = await push_traffic(bootstrap, settings)
        port = settings.metrics_port

        async def probe() -> dict[str, list[tuple[dict[str, str], float]]]:
            return await scrape(port)

        def complete(samples: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
            return (
                total(samples, "embedstream_results_total") == expected
                and total(samples, "embedstream_dead_letters_total") == len(BAD_EVENTS)
                and used <= with_samples(samples)
                and total(samples, "embedstream_ready") == 1
            )

        samples = await last_sample_when(probe, complete)

    exported = {_SERIES_SUFFIX.sub("", name) for name in samples}
    assert used - exported == set(), "queried by the dashboard or alerts but never exported"
    assert used - with_samples(samples) == set(), "exported without a single sample"
    assert total(samples, "embedstream_results_total") == expected
    assert total(samples, "embedstream_dead_letters_total") == len(BAD_EVENTS)
    assert total(samples, "embedstream_retries_total") >= 1
    assert total(samples, "embedstream_ready") == 1
    lag_topics = {labels["topic"] for labels, _ in samples["embedstream_consumer_lag"]}
    names = topic_names(unique_prefix)
    assert {names.requests_high, names.requests_low} <= lag_topics


# --------------------------------------------------------------------------- (b) Prometheus


def prometheus_binary() -> str:
    path = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if path is None:
        if os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") == "1":
            pytest.fail("EMBEDSTREAM_REQUIRE_TOOLS=1 but the prometheus binary is not installed")
        pytest.skip("prometheus not installed (apt-get install prometheus, or a release tarball)")
    return path


@contextlib.asynccontextmanager
async def running_prometheus(tmp_path: Path, target_port: int) -> AsyncIterator[str]:
    """A Prometheus scraping 127.0.0.1:target_port every second with the repository's alert
    rules; yields its base URL and always stops it."""
    binary = prometheus_binary()
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERT_RULES)],
        "scrape_configs": [
            {
                "job_name": "embedstream",
                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
            }
        ],
    }
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    log_path = tmp_path / "prometheus.log"
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await wait_until_ready(base, process, log_path)
            yield base
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 20)
                except TimeoutError:
                    process.kill()
                    await asyncio.wait_for(process.wait(), 10)


async def wait_until_ready(base: str, process: asyncio.subprocess.Process, log: Path) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
        while time.monotonic() < deadline:
            if process.returncode is not None:
                break
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{base}/-/ready") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.25)
    raise AssertionError(
        f"prometheus did not become ready (exit {process.returncode}):\n{log_tail(log)}"
    )


def log_tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-chars:]


async def api(session: aiohttp.ClientSession, base: str, path: str, **params: str) -> Any:
    async with session.get(f"{base}{path}", params=params) as response:
        body: Any = await response.json()
    assert body.get("status") == "success", f"{path} {params}: {body}"
    return body["data"]


async def instant(session: aiohttp.ClientSession, base: str, query: str) -> list[Any]:
    data = await api(session, base, "/api/v1/query", query=query)
    result: list[Any] = data["result"]
    return result


def values(result: list[Any]) -> list[float]:
    return [float(sample["value"][1]) for sample in result]


async def test_prometheus_scrapes_results_readiness_and_evaluates_the_rules(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    prometheus_binary()  # skip before touching the broker when it is missing
    async with (
        processor_with_simulator(bootstrap, unique_prefix) as settings,
        running_prometheus(tmp_path, settings.metrics_port) as base,
        aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
    ):
        expected = await push_traffic(bootstrap, settings)

        async def results() -> list[float]:
            return values(await instant(session, base, "sum(embedstream_results_total)"))

        assert await last_sample_when(results, lambda v: v == [float(expected)]) == [
            float(expected)
        ]

        async def ready() -> list[float]:
            return values(await instant(session, base, "embedstream_ready"))

        assert await last_sample_when(ready, lambda v: v == [1.0]) == [1.0]

        async def rules() -> list[dict[str, Any]]:
            data = await api(session, base, "/api/v1/rules")
            return [r for g in data["groups"] if g["name"] == "embedstream" for r in g["rules"]]

        def evaluated(found: list[dict[str, Any]]) -> bool:
            return len(found) == len(rule_queries()) and all(r.get("health") == "ok" for r in found)

        loaded = await last_sample_when(rules, evaluated)
        assert len(loaded) == len(rule_queries()), "Prometheus did not load every alert rule"
        broken = {r["name"]: (r.get("health"), r.get("lastError")) for r in loaded}
        assert {n: h for n, h in broken.items() if h[0] != "ok"} == {}

        # Every panel of the processor gets data; the store writer's row is another process's.
        queries = [
            as_instant_query(q)
            for q in dashboard_queries()
            if not metric_names([q]) & STORE_WRITER_ONLY and 'job="embedstream-sink"' not in q
        ]

        async def empty_queries() -> list[str]:
            return [q for q in queries if not await instant(session, base, q)]

        assert await last_sample_when(empty_queries, lambda empty: not empty) == []
