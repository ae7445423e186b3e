"""The deployment files state the facts the code relies on: docker-compose.yml, the Dockerfile,
the Kubernetes manifests and the Grafana dashboard agree with each other and with the package
(topics, consumer group, metrics port, probe paths)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from embedstream.app.processor import input_topics_of
from embedstream.kafka.client.admin import configured_topics, load_topic_specs
from embedstream.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DEPLOYMENT = ROOT / "ops" / "k8s" / "deployment.yaml"
SCALED_OBJECT = ROOT / "ops" / "k8s" / "keda-scaledobject.yaml"
HIGH = ROOT / "ops" / "k8s" / "high.yaml"
SERVICE_MONITOR = ROOT / "ops" / "k8s" / "servicemonitor.yaml"
DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "embedstream.json"
GRAFANA_DATASOURCE = ROOT / "ops" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"

SERVICES = (
    *("kafka", "topics", "simulator", "processor", "prometheus", "grafana"),
    *("postgres", "sink", "redis"),
)
SINK = ROOT / "ops" / "k8s" / "sink.yaml"
PINNED_IMAGES = {
    "kafka": "apache/kafka",
    "redis": "redis",
    "postgres": "pgvector/pgvector",
    "prometheus": "prom/prometheus",
    "grafana": "grafana/grafana",
}
DEFAULTS = Settings()


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _load_all_yaml(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = _load_yaml(COMPOSE)
    assert isinstance(compose, dict) and isinstance(compose.get("services"), dict)
    found: dict[str, Any] = compose["services"]
    return found


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a mapping, whether written as a mapping or a list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in env)
        return {key: value for key, value in pairs}
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def _strings(node: Any) -> Iterator[str]:
    """Every scalar in a parsed YAML/JSON document, as text."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif node is not None:
        yield str(node)


# --------------------------------------------------------------------------- docker compose


def test_compose_declares_every_service(services: dict[str, Any]) -> None:
    assert set(SERVICES) <= set(services), sorted(set(SERVICES) - set(services))


@pytest.mark.parametrize("name", sorted(PINNED_IMAGES))
def test_third_party_images_are_pinned(services: dict[str, Any], name: str) -> None:
    image = str(services[name]["image"])
    repository, _, tag = image.rpartition(":")
    assert repository == PINNED_IMAGES[name], image
    assert tag and tag != "latest" and "/" not in tag, f"{name}: image {image!r} is not pinned"
    assert re.search(r"\d", tag), f"{name}: tag {tag!r} names no version"


def test_kafka_runs_in_kraft_mode(services: dict[str, Any]) -> None:
    env = _environment(services["kafka"])
    roles = {role.strip() for role in env["KAFKA_PROCESS_ROLES"].split(",")}
    assert roles == {"broker", "controller"}
    assert env.get("KAFKA_CONTROLLER_QUORUM_VOTERS")
    assert not any("ZOOKEEPER" in key for key in env)
    # The processor and the topic job reach the broker by its service name.
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")


def test_dockerfile_runs_as_fixed_non_root_user() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    users = re.findall(r"^\s*USER\s+(\S+)", text, flags=re.MULTILINE)
    assert users, "Dockerfile has no USER instruction"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), f"USER {users[-1]!r} should be numeric so runAsNonRoot can verify it"
    assert int(uid) != 0
    assert re.search(r'^ENTRYPOINT \["embedstream"\]', text, flags=re.MULTILINE)
    assert re.search(r'^CMD \["run"\]', text, flags=re.MULTILINE)
    assert re.search(r"^EXPOSE 9464\b", text, flags=re.MULTILINE)
    assert "EMBEDSTREAM_METRICS_HOST=0.0.0.0" in text
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, flags=re.MULTILINE)
    # Installed from the build context, not in editable (development) mode.
    assert not re.search(r"pip install[^\n]*(-e|--editable)\b", text)


def test_processor_is_built_from_this_repository(services: dict[str, Any]) -> None:
    build = services["processor"]["build"]
    context = build if isinstance(build, str) else build["context"]
    assert (COMPOSE.parent / context).resolve() == ROOT
    assert services["processor"].get("user") in (None, "10001", "10001:10001")


@pytest.mark.parametrize(
    "name", ["kafka", "simulator", "processor", "prometheus", "grafana", "postgres", "sink"]
)
def test_long_running_services_have_healthchecks(services: dict[str, Any], name: str) -> None:
    check = services[name].get("healthcheck")
    assert check and not check.get("disable"), name
    assert check["test"], name


def test_processor_health_check_asks_for_readiness(services: dict[str, Any]) -> None:
    command = " ".join(services["processor"]["healthcheck"]["test"])
    assert f":{DEFAULTS.metrics_port}/readyz" in command


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("prometheus", "http://127.0.0.1:9090/-/ready"),
        ("grafana", "http://127.0.0.1:3000/api/health"),
    ],
)
def test_monitoring_health_checks_ask_the_service_itself(
    services: dict[str, Any], name: str, url: str
) -> None:
    test = services[name]["healthcheck"]["test"]
    # Exec form with the image's own busybox wget: neither image ships curl or a shell script.
    assert test[:2] == ["CMD", "wget"] and test[-1] == url
    published = {p.rsplit(":", 2)[-1] for p in services[name]["ports"]}
    assert url.split(":")[2].split("/")[0] in published


def test_grafana_waits_for_a_healthy_prometheus(services: dict[str, Any]) -> None:
    assert _conditions(services["grafana"]) == {"prometheus": "service_healthy"}


def test_kafka_health_check_uses_the_kafka_tools(services: dict[str, Any]) -> None:
    command = " ".join(services["kafka"]["healthcheck"]["test"])
    assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in command or (
        "kafka-topics.sh" in command and "--list" in command
    )


def _conditions(service: dict[str, Any]) -> dict[str, str]:
    depends = service.get("depends_on") or {}
    assert isinstance(depends, dict), "depends_on must name conditions"
    return {name: spec["condition"] for name, spec in depends.items()}


def test_start_order_waits_for_health_and_topics(services: dict[str, Any]) -> None:
    assert _conditions(services["topics"]) == {"kafka": "service_healthy"}
    assert _conditions(services["processor"]) == {
        "kafka": "service_healthy",
        "topics": "service_completed_successfully",
        "simulator": "service_healthy",
        "redis": "service_healthy",
    }


def test_topics_job_is_one_shot(services: dict[str, Any]) -> None:
    topics = services["topics"]
    assert topics["command"] == ["topics", "create"]
    assert str(topics.get("restart")) == "no"
    assert _environment(topics)["EMBEDSTREAM_BOOTSTRAP_SERVERS"] == "kafka:9092"


def test_simulator_listens_on_the_container_interface(services: dict[str, Any]) -> None:
    command = services["simulator"]["command"]
    assert command[0] == "simulate"
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert command[command.index("--port") + 1] == "8700"


def test_processor_provider_is_switchable_by_environment(services: dict[str, Any]) -> None:
    env = _environment(services["processor"])
    assert env["EMBEDSTREAM_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert env["EMBEDSTREAM_BASE_URL"] == "${EMBEDSTREAM_BASE_URL:-http://simulator:8700/v1}"
    assert env["OPENAI_API_KEY"] == "${OPENAI_API_KEY:-}"


def test_no_secrets_in_compose() -> None:
    raw = COMPOSE.read_text(encoding="utf-8")
    assert not re.search(r"sk-[A-Za-z0-9_-]{8,}", raw), "something that looks like an API key"
    compose = yaml.safe_load(raw)
    for value in _strings(compose):
        assert not value.startswith("sk-"), value
    for name, service in compose["services"].items():
        for key, value in _environment(service).items():
            if "API_KEY" in key or "PASSWORD" in key or "SECRET" in key or "TOKEN" in key:
                # Only interpolation from the caller's environment, never a literal.
                assert re.fullmatch(r"\$\{[A-Z0-9_]+(:-)?\}", value), f"{name}: {key}={value!r}"


def _published_ports(service: dict[str, Any]) -> list[str]:
    ports = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            ports.append(f"{port.get('host_ip', '')}:{port.get('published')}:{port['target']}")
        else:
            ports.append(str(port))
    return ports


def test_published_ports_are_loopback_only(services: dict[str, Any]) -> None:
    published = {name: _published_ports(service) for name, service in services.items()}
    assert any(published.values())
    for name, ports in published.items():
        for port in ports:
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port!r} on every interface"
    assert "127.0.0.1:9464:9464" in published["processor"]
    assert "127.0.0.1:3000:3000" in published["grafana"]
    assert "127.0.0.1:9090:9090" in published["prometheus"]


def _bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    mounts = []
    for volume in service.get("volumes") or []:
        source, _, rest = str(volume).partition(":")
        if source.startswith((".", "/")):
            mounts.append(((COMPOSE.parent / source).resolve(), rest.split(":")[0]))
    return mounts


@pytest.mark.parametrize("name", ["prometheus", "grafana"])
def test_bind_mounts_point_at_repository_files(services: dict[str, Any], name: str) -> None:
    mounts = _bind_mounts(services[name])
    assert mounts, f"{name} mounts nothing from the repository"
    for source, target in mounts:
        assert source.exists(), f"{name} mounts missing {source}"
        assert ROOT in source.parents, f"{name} mounts {source} from outside the repository"
        assert target.startswith("/")


def test_prometheus_mount_holds_config_and_rules(services: dict[str, Any]) -> None:
    (source, target), *_ = _bind_mounts(services["prometheus"])
    config = _load_yaml(source / "prometheus.yml")
    assert f"--config.file={target}/prometheus.yml" in services["prometheus"]["command"]
    for rule_file in config["rule_files"]:
        assert (source / rule_file).is_file(), rule_file
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for group in jobs["embedstream"]["static_configs"] for t in group["targets"]]
    assert targets == [f"processor:{DEFAULTS.metrics_port}"]


def test_grafana_mounts_provisioning_and_dashboard(services: dict[str, Any]) -> None:
    targets = {target: source for source, target in _bind_mounts(services["grafana"])}
    datasources = targets["/etc/grafana/provisioning/datasources"]
    providers = _load_yaml(targets["/etc/grafana/provisioning/dashboards"] / "embedstream.yml")
    dashboards_dir = providers["providers"][0]["options"]["path"]
    assert (targets[dashboards_dir] / DASHBOARD.name).is_file()
    assert (datasources / GRAFANA_DATASOURCE.name).is_file()


# --------------------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="module")
def k8s() -> dict[str, Any]:
    docs = _load_all_yaml(DEPLOYMENT) + _load_all_yaml(SCALED_OBJECT)
    docs += _load_all_yaml(SERVICE_MONITOR)
    by_kind: dict[str, Any] = {}
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        assert doc["kind"] not in by_kind, f"several {doc['kind']} documents"
        by_kind[doc["kind"]] = doc
    expected = {"ConfigMap", "Deployment", "ScaledObject", "Service", "PodDisruptionBudget"}
    assert expected | {"ServiceMonitor"} <= set(by_kind)
    return by_kind


def _container(k8s: dict[str, Any]) -> dict[str, Any]:
    containers = k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _metrics_port(k8s: dict[str, Any]) -> int:
    return int(k8s["ConfigMap"]["data"].get("EMBEDSTREAM_METRICS_PORT", DEFAULTS.metrics_port))


def _with_keys_file(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The ConfigMap's environment with the online keys' Secret file standing in locally."""
    keys = tmp_path / "online-keys"
    keys.write_text("rag:stand-in-key\n")
    return {**env, "EMBEDSTREAM_HTTP_API_KEYS_FILE": str(keys)}


def _high(k8s: dict[str, Any]) -> dict[str, Any]:
    """high.yaml's documents by kind: the high lane's processors."""
    return _documents_by_kind(HIGH)


def _lanes_env(deployment: dict[str, Any]) -> str:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    return str(env.get("EMBEDSTREAM_INPUT_LANES", "all"))


def test_keda_scales_each_processor_deployment_on_the_topics_it_reads(
    k8s: dict[str, Any], tmp_path: Path
) -> None:
    config = k8s["ConfigMap"]["data"]
    high = _high(k8s)
    all_topics = set(configured_topics(load_settings(env=_with_keys_file(config, tmp_path))).inputs)
    reads: dict[str, set[str]] = {}
    for deployment, scaled in ((k8s["Deployment"], k8s["ScaledObject"]),
                               (high["Deployment"], high["ScaledObject"])):  # fmt: skip
        assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        # The topics as the processor resolves them from its ConfigMap and lanes, not assumed.
        env = _with_keys_file({**config, "EMBEDSTREAM_INPUT_LANES": _lanes_env(deployment)},
                              tmp_path)  # fmt: skip
        settings = load_settings(env=env)
        names = configured_topics(settings)
        read = set(input_topics_of(settings, names))
        reads[deployment["metadata"]["name"]] = read
        triggers = scaled["spec"]["triggers"]
        assert {t["type"] for t in triggers} == {"kafka"}
        by_topic = {t["metadata"]["topic"]: t["metadata"] for t in triggers}
        # A trigger for every request topic it reads (the retry topic follows the low lane).
        assert sorted(by_topic) == sorted(read & set(names.requests))
        for meta in by_topic.values():
            assert meta["consumerGroup"] == DEFAULTS.group_id
            assert meta["consumerGroup"] == config.get("EMBEDSTREAM_GROUP_ID", DEFAULTS.group_id)
            assert meta["bootstrapServers"] == config["EMBEDSTREAM_BOOTSTRAP_SERVERS"]
            assert meta.get("offsetResetPolicy", "latest") == "earliest"  # as the consumer resets
            assert str(meta.get("allowIdleConsumers", "false")).lower() == "false"
    # One group, every input topic read by exactly one of the two Deployments.
    bulk, high_reads = reads["embedstream"], reads["embedstream-high"]
    assert bulk | high_reads == all_topics and not bulk & high_reads
    assert high_reads == set(
        configured_topics(load_settings(env=_with_keys_file(config, tmp_path))).high
    )
    high_threshold = min(int(t["metadata"]["lagThreshold"])
                         for t in high["ScaledObject"]["spec"]["triggers"])  # fmt: skip
    low_threshold = min(int(t["metadata"]["lagThreshold"])
                        for t in k8s["ScaledObject"]["spec"]["triggers"])  # fmt: skip
    assert 0 < high_threshold <= low_threshold, "interactive traffic should scale out first"


def test_the_high_lane_processors_are_the_bulk_ones_but_for_their_lanes(
    k8s: dict[str, Any],
) -> None:
    """high.yaml's pods run as deployment.yaml's (same image, command, ConfigMap, key, probes,
    security, resources and drain), in pods of their own: selectors that never overlap, their
    own disruption budget and metrics Service."""
    high = _high(k8s)
    bulk_pod = k8s["Deployment"]["spec"]["template"]
    high_pod = high["Deployment"]["spec"]["template"]

    def without_lanes(pod: dict[str, Any]) -> dict[str, Any]:
        spec = json.loads(json.dumps(pod["spec"]))
        [container] = spec["containers"]
        container["env"] = [e for e in container["env"] if e["name"] != "EMBEDSTREAM_INPUT_LANES"]
        return dict(spec)

    assert without_lanes(high_pod) == without_lanes(bulk_pod)
    assert (_lanes_env(k8s["Deployment"]), _lanes_env(high["Deployment"])) == ("bulk", "high")
    bulk_labels = _pod_labels(k8s)
    high_labels = high["Deployment"]["spec"]["selector"]["matchLabels"]
    assert high_labels == high_pod["metadata"]["labels"]
    assert not high_labels.items() <= bulk_labels.items()
    assert not bulk_labels.items() <= high_labels.items()
    assert high["PodDisruptionBudget"]["spec"] == {
        "maxUnavailable": 1, "selector": {"matchLabels": high_labels}
    }  # fmt: skip
    assert high["Service"]["spec"]["selector"] == high_labels
    assert high["Service"]["spec"]["ports"] == k8s["Service"]["spec"]["ports"]
    assert high["Service"]["spec"]["publishNotReadyAddresses"] is True
    assert "replicas" not in high["Deployment"]["spec"]
    assert high["ScaledObject"]["spec"]["maxReplicaCount"] <= min(
        spec.partitions for spec in load_topic_specs("embed.") if spec.key == "requests_high"
    )


def test_keda_replicas_stay_within_partitions(k8s: dict[str, Any]) -> None:
    partitions = {spec.key: spec.partitions for spec in load_topic_specs("embed.")}
    spec = k8s["ScaledObject"]["spec"]
    assert spec["scaleTargetRef"]["name"] == k8s["Deployment"]["metadata"]["name"]
    assert spec["minReplicaCount"] == 1
    most = min(partitions["requests_high"], partitions["requests_low"])
    assert 1 <= spec["maxReplicaCount"] <= most
    # KEDA owns the replica count; a fixed one in the Deployment would fight the HPA.
    assert "replicas" not in k8s["Deployment"]["spec"]


def test_probes_hit_readyz_and_healthz_on_the_metrics_port(k8s: dict[str, Any]) -> None:
    container = _container(k8s)
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert _metrics_port(k8s) == DEFAULTS.metrics_port
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        port = get["port"]
        assert (ports[port] if isinstance(port, str) else port) == _metrics_port(k8s)
    # The probes come from the kubelet, so the server must not bind loopback only.
    assert k8s["ConfigMap"]["data"]["EMBEDSTREAM_METRICS_HOST"] == "0.0.0.0"


def test_deployment_is_non_root_with_secret_key_and_room_to_drain(
    k8s: dict[str, Any], tmp_path: Path
) -> None:
    pod = k8s["Deployment"]["spec"]["template"]["spec"]
    container = _container(k8s)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"].get("runAsUser", 10001) != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # The memory asked for holds what the defaults let a process keep: the buffer and the
    # embedding cache (on by default), beside the interpreter and its libraries.
    settings = load_settings(env=_with_keys_file(k8s["ConfigMap"]["data"], tmp_path))
    cache = settings.cache_max_bytes if settings.cache != "off" else 0
    held = settings.max_buffered_bytes + cache
    assert _mib(container["resources"]["requests"]["memory"]) >= 160 + held / 2**20
    # Drain: the in-flight calls may each take up to request_timeout_s.
    assert pod["terminationGracePeriodSeconds"] >= 2 * DEFAULTS.request_timeout_s
    config_refs = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    assert config_refs == [k8s["ConfigMap"]["metadata"]["name"]]
    key = {e["name"]: e for e in container["env"]}["OPENAI_API_KEY"]
    assert "value" not in key and key["valueFrom"]["secretKeyRef"]["name"]
    for value in _strings(k8s):
        assert not value.startswith("sk-"), value
    # Keys only as files mounted from Secrets (a _FILE variable names the file, not the key).
    assert not any(
        "API_KEY" in name and not name.endswith("_FILE") for name in k8s["ConfigMap"]["data"]
    )


def _pod_labels(k8s: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert k8s["Deployment"]["spec"]["selector"]["matchLabels"] == labels
    return labels


def test_disruption_budget_evicts_one_processor_at_a_time(k8s: dict[str, Any]) -> None:
    budget = k8s["PodDisruptionBudget"]
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"]["selector"]["matchLabels"] == _pod_labels(k8s)
    # One at a time (each eviction rebalances the group), and never a budget that a single
    # replica (KEDA's minimum) could not satisfy, which would block node drains for good.
    assert budget["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in budget["spec"]


def test_service_monitor_scrapes_the_metrics_port_of_every_processor(k8s: dict[str, Any]) -> None:
    service, monitor = k8s["Service"], k8s["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert service["spec"]["selector"] == _pod_labels(k8s)
    # Not-ready processors are scraped too: their metrics say why they are not ready.
    assert service["spec"]["publishNotReadyAddresses"] is True
    [port] = service["spec"]["ports"]
    assert port["targetPort"] == "metrics"
    assert {p["name"] for p in _container(k8s)["ports"]} >= {"metrics"}
    assert port["port"] == _metrics_port(k8s)
    # It selects both processor Services (deployment.yaml's and high.yaml's), nothing else.
    for labels in (service["metadata"]["labels"], _high(k8s)["Service"]["metadata"]["labels"]):
        assert _selects(monitor["spec"]["selector"], labels), labels
    online = _documents_by_kind(ROOT / "ops" / "k8s" / "online.yaml")["Service"]
    assert not _selects(monitor["spec"]["selector"], online["metadata"]["labels"])
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == (port["name"], "/metrics")
    interval = int(endpoint["interval"].removesuffix("s"))
    assert int(endpoint["scrapeTimeout"].removesuffix("s")) < interval


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's matchLabels and matchExpressions (In, NotIn) against ``labels``."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        value, values = labels.get(expression["key"]), expression["values"]
        if (expression["operator"] == "In") != (value in values):
            return False
    return True


# --------------------------------------------------------------------------- Grafana


def _datasources(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            else:
                yield from _datasources(value)
    elif isinstance(node, list):
        for item in node:
            yield from _datasources(item)


def test_dashboard_uses_only_the_provisioned_prometheus_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] and dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    datasources = list(_datasources(dashboard))
    assert datasources
    for ds in datasources:
        assert isinstance(ds, dict) and ds.get("uid") == "prometheus", ds
    provisioned = _load_yaml(GRAFANA_DATASOURCE)["datasources"]
    assert [(d["uid"], d["url"]) for d in provisioned] == [("prometheus", "http://prometheus:9090")]


def test_dashboard_panels_have_queries_and_unique_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert "embedstream_" in target["expr"], panel["title"]


def test_dashboard_has_a_row_for_the_accounting_of_every_source_metric() -> None:
    from embedstream.ops.accounting import SOURCE_METRIC_NAMES

    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    titles = [p["title"] for p in panels]
    row = titles.index("Accounting per source")
    assert panels[row]["type"] == "row"
    exprs = " ".join(t["expr"] for p in panels[row + 1 :] if p["type"] != "row"
                     for t in p["targets"])  # fmt: skip
    # Hits are a count beside the tokens saved: the row shows the tokens.
    for name in SOURCE_METRIC_NAMES - {"embedstream_source_cache_hits_total"}:
        assert name in exprs, name
    assert "by (source" in exprs  # split by source, not summed away


def test_dashboard_has_a_row_for_the_money_every_batch_metric_and_the_alerts_threshold() -> None:
    from embedstream.ops.batch_metrics import BATCH_METRIC_NAMES

    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    titles = [p["title"] for p in panels]
    row = titles.index("Money: price tiers and batch jobs")
    assert panels[row]["type"] == "row"
    exprs = " ".join(t["expr"] for p in panels[row + 1 :] if p["type"] != "row"
                     for t in p["targets"])  # fmt: skip
    for name in BATCH_METRIC_NAMES:
        assert name in exprs, name
    assert "by (tier" in exprs  # the price tiers apart
    rules = _load_yaml(ROOT / "ops" / "prometheus" / "alerts.yml")["groups"][0]["rules"]
    [past] = [r for r in rules if r["alert"] == "EmbedstreamBatchJobPastItsWindow"]
    assert "embedstream_batch_job_oldest_seconds" in past["expr"]


# --------------------------------------------------------------------------- Kubernetes, SASL

BASE_KUSTOMIZATION = ROOT / "ops" / "k8s" / "kustomization.yaml"
SASL_DIR = ROOT / "ops" / "k8s-sasl"
# KEDA's name of each SASL mechanism (its kafka scaler's `sasl` parameter).
KEDA_SASL = {"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}


@pytest.fixture(scope="module")
def sasl() -> dict[str, Any]:
    kustomization = _load_yaml(SASL_DIR / "kustomization.yaml")
    patches = {doc["kind"]: doc for doc in _load_all_yaml(SASL_DIR / "processor-sasl.yaml")}
    [pod_patch] = [
        p for p in kustomization["patches"] if p.get("target", {}).get("kind") == "Deployment"
    ]
    patches["Deployment"] = _load_yaml(SASL_DIR / pod_patch["path"])
    json_patches = {p["target"]["name"]: p for p in kustomization["patches"]
                    if "patch" in p and p["target"]["kind"] == "ScaledObject"}  # fmt: skip
    return {
        "kustomization": kustomization,
        "trigger_auth": _load_yaml(SASL_DIR / "keda-trigger-auth.yaml"),
        "patches": patches,
        "pod_patch": pod_patch,
        "json_patches": json_patches,
    }


def test_base_kustomization_lists_every_manifest() -> None:
    listed = set(_load_yaml(BASE_KUSTOMIZATION)["resources"])
    # The ServiceMonitor needs the Prometheus Operator's CRDs: applied on its own (docs: Deploying).
    optional = {BASE_KUSTOMIZATION.name, "servicemonitor.yaml"}
    manifests = {p.name for p in DEPLOYMENT.parent.glob("*.yaml")} - optional
    assert listed == manifests


def test_sasl_overlay_builds_on_the_base(sasl: dict[str, Any]) -> None:
    kustomization = sasl["kustomization"]
    assert kustomization["resources"] == ["../k8s", "keda-trigger-auth.yaml"]
    for patch in kustomization["patches"]:
        if "path" in patch:
            assert (SASL_DIR / patch["path"]).is_file()


def test_trigger_authentication_reads_the_secret_only(sasl: dict[str, Any]) -> None:
    auth = sasl["trigger_auth"]
    assert auth["apiVersion"] == "keda.sh/v1alpha1" and auth["kind"] == "TriggerAuthentication"
    assert set(auth["spec"]) == {"secretTargetRef"}
    refs = auth["spec"]["secretTargetRef"]
    assert {r["parameter"] for r in refs} >= {"username", "password"}
    assert {r["name"] for r in refs} == {"embedstream-kafka"}
    assert all(set(r) == {"parameter", "name", "key"} for r in refs)  # no literal values


def _apply_json_patch(document: Any, operations: list[dict[str, Any]]) -> Any:
    """The `add` operations of RFC 6902, enough for the overlay; a path into nothing fails."""
    for op in operations:
        assert op["op"] == "add", op
        *parents, last = op["path"].strip("/").split("/")
        node = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = op["value"]
    return document


def test_sasl_overlay_keda_and_processor_agree(k8s: dict[str, Any], sasl: dict[str, Any]) -> None:
    config = {**k8s["ConfigMap"]["data"], **sasl["patches"]["ConfigMap"]["data"]}
    assert sasl["patches"]["ConfigMap"]["metadata"]["name"] == k8s["ConfigMap"]["metadata"]["name"]
    json_patches = sasl["json_patches"]
    base = {k8s["ScaledObject"]["metadata"]["name"]: k8s["ScaledObject"]}
    base[_high(k8s)["ScaledObject"]["metadata"]["name"]] = _high(k8s)["ScaledObject"]
    assert set(json_patches) == set(base)  # every ScaledObject's triggers log in
    auth_name = sasl["trigger_auth"]["metadata"]["name"]
    tls = config["EMBEDSTREAM_SECURITY_PROTOCOL"] in ("SSL", "SASL_SSL")
    for name, json_patch in json_patches.items():
        scaled = _apply_json_patch(
            json.loads(json.dumps(base[name])), yaml.safe_load(json_patch["patch"])
        )
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["authenticationRef"] == {"name": auth_name}
            assert trigger["metadata"]["sasl"] == KEDA_SASL[config["EMBEDSTREAM_SASL_MECHANISM"]]
            assert trigger["metadata"]["tls"] == ("enable" if tls else "disable")


def test_sasl_overlay_mounts_the_password_the_settings_read(
    k8s: dict[str, Any], sasl: dict[str, Any], tmp_path: Path
) -> None:
    patch = sasl["patches"]["Deployment"]
    # Patched into both processor Deployments, chosen by their labels.
    selector = sasl["pod_patch"]["target"]["labelSelector"]
    key, _, values = selector.partition(" in ")
    chosen = {v.strip() for v in values.strip("()").split(",")}
    for deployment in (k8s["Deployment"], _high(k8s)["Deployment"]):
        assert deployment["metadata"]["labels"][key] in chosen, deployment["metadata"]["name"]
    online = _documents_by_kind(ROOT / "ops" / "k8s" / "online.yaml")["Deployment"]
    assert online["metadata"]["labels"][key] not in chosen
    pod = patch["spec"]["template"]["spec"]
    base_pod = k8s["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["fsGroup"] == base_pod["securityContext"]["runAsGroup"]
    [container] = pod["containers"]
    assert container["name"] == _container(k8s)["name"]
    env = {e["name"]: e for e in container["env"]}
    ref = env["EMBEDSTREAM_SASL_USERNAME"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "embedstream-kafka", "key": "username"}
    [volume] = pod["volumes"]
    [mount] = container["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    assert volume["secret"]["secretName"] == "embedstream-kafka"
    [item] = volume["secret"]["items"]
    config = {**k8s["ConfigMap"]["data"], **sasl["patches"]["ConfigMap"]["data"]}
    assert item["key"] == "password"
    assert config["EMBEDSTREAM_SASL_PASSWORD_FILE"] == f"{mount['mountPath']}/{item['path']}"
    # The merged configuration is one the processor accepts.
    password = tmp_path / "password"
    password.write_text("pw\n")
    env_vars = {k: str(v) for k, v in config.items()}
    env_vars |= {"EMBEDSTREAM_SASL_PASSWORD_FILE": str(password), "EMBEDSTREAM_SASL_USERNAME": "u"}
    settings = load_settings(env=_with_keys_file(env_vars, tmp_path))
    assert (settings.security_protocol, settings.sasl_password) == ("SASL_SSL", "pw")


def test_the_deploying_page_creates_the_secret_the_overlay_reads() -> None:
    page = (ROOT / "docs" / "operations" / "deploying.md").read_text(encoding="utf-8")
    assert "kubectl create secret generic embedstream-kafka" in page
    assert "--from-literal=username=" in page and "--from-literal=password=" in page
    assert "ops/k8s-sasl" in page


def test_sasl_overlay_renders_with_kubectl() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(SASL_DIR)], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert {"ConfigMap", "Deployment", "ScaledObject", "TriggerAuthentication"} <= set(docs)
    rendered_docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    scaled = [doc for doc in rendered_docs if doc["kind"] == "ScaledObject"]
    assert len(scaled) == 2
    assert all("authenticationRef" in t for s in scaled for t in s["spec"]["triggers"])
    processors = [d for d in rendered_docs if d["kind"] == "Deployment"
                  and d["metadata"]["name"] in ("embedstream", "embedstream-high")]  # fmt: skip
    for deployment in processors:
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert "EMBEDSTREAM_SASL_USERNAME" in {e["name"] for e in container["env"]}


def test_the_dashboard_shows_the_cache() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for name in ("hits", "misses", "errors", "tokens_saved"):
        assert f"embedstream_cache_{name}_total" in exprs, name


def test_the_dashboard_shows_the_fleets_budget_and_the_lane_processes() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for name in (
        "budget_fleet_in_flight", "budget_members", "budget_leases", "budget_on_own_share",
        "budget_waits_total", "lane_process_restarts_total",
    ):  # fmt: skip
        assert f"embedstream_{name}" in exprs, name


# --------------------------------------------------------------------------- the store writer


def test_compose_sink_writes_to_the_compose_postgres_and_is_scraped(
    services: dict[str, Any],
) -> None:
    sink = services["sink"]
    assert sink["command"] == ["sink"] and "build" in sink  # the repository's image
    assert _conditions(sink) == {
        "kafka": "service_healthy",
        "topics": "service_completed_successfully",
        "postgres": "service_healthy",
    }
    env = _environment(sink)
    settings = load_settings(env=env)
    assert settings.bootstrap_servers == "kafka:9092"
    assert settings.store_dsn is not None and "@postgres:5432/" in settings.store_dsn
    assert ":" not in settings.store_dsn.split("//", 1)[1].split("@", 1)[0]  # no password
    postgres_env = _environment(services["postgres"])
    assert settings.store_dsn.endswith("/" + postgres_env["POSTGRES_DB"])
    assert f"//{postgres_env['POSTGRES_USER']}@" in settings.store_dsn
    assert f":{DEFAULTS.metrics_port}/readyz" in " ".join(sink["healthcheck"]["test"])
    assert "127.0.0.1:9465:9464" in _published_ports(sink)
    config = _load_yaml(ROOT / "ops" / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for g in jobs["embedstream-sink"]["static_configs"] for t in g["targets"]]
    assert targets == [f"sink:{DEFAULTS.metrics_port}"]


def test_the_image_can_run_the_store_writer() -> None:
    # The sink imports psycopg and pgvector: the image installs the wheel with that extra.
    assert "[pgvector]" in DOCKERFILE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sink_k8s() -> dict[str, Any]:
    by_kind = {doc["kind"]: doc for doc in _load_all_yaml(SINK)}
    assert set(by_kind) == {"ConfigMap", "Deployment", "Service"}
    return by_kind


def test_sink_deployment_probes_readyz_and_healthz_and_runs_the_sink(
    sink_k8s: dict[str, Any],
) -> None:
    [container] = sink_k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["sink"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    data = sink_k8s["ConfigMap"]["data"]
    assert ports["metrics"] == int(data["EMBEDSTREAM_METRICS_PORT"])
    assert data["EMBEDSTREAM_METRICS_HOST"] == "0.0.0.0"
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
    service = sink_k8s["Service"]
    pod_labels = sink_k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == pod_labels
    assert sink_k8s["Deployment"]["spec"]["selector"]["matchLabels"] == pod_labels


def test_sink_reads_the_dsn_from_a_mounted_secret_file(
    sink_k8s: dict[str, Any], tmp_path: Path
) -> None:
    pod = sink_k8s["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    data = sink_k8s["ConfigMap"]["data"]
    assert "EMBEDSTREAM_STORE_DSN" not in data and "env" not in container
    dsn_file = Path(data["EMBEDSTREAM_STORE_DSN_FILE"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    [secret_volume] = [name for name, v in volumes.items() if "secret" in v]
    assert mounts[secret_volume]["readOnly"] is True
    items = {i["path"]: i["key"] for i in volumes[secret_volume]["secret"]["items"]}
    assert dsn_file.parent == Path(mounts[secret_volume]["mountPath"]) and dsn_file.name in items
    # The settings of the ConfigMap load, with the DSN read from a file where Kubernetes puts it.
    stand_in = tmp_path / "dsn"
    stand_in.write_text("postgresql://writer:pw@db:5432/vectors\n", encoding="utf-8")
    settings = load_settings(env={**data, "EMBEDSTREAM_STORE_DSN_FILE": str(stand_in)})
    assert settings.store_dsn == "postgresql://writer:pw@db:5432/vectors"
    processor = _load_all_yaml(DEPLOYMENT)[0]["data"]
    assert settings.store_group_id != processor["EMBEDSTREAM_GROUP_ID"]
    assert settings.topic_prefix == processor["EMBEDSTREAM_TOPIC_PREFIX"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_dashboard_store_row_queries_the_store_writers_metrics() -> None:
    from embedstream.ops.store_metrics import STORE_METRIC_NAMES

    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    titles = [p["title"] for p in panels]
    row = titles.index("Store writer (embedstream sink)")
    rows_after = [i for i, p in enumerate(panels) if p.get("type") == "row" and i > row]
    end = rows_after[0] if rows_after else len(panels)
    exprs = [t["expr"] for p in panels[row + 1 : end] for t in p.get("targets", [])]
    assert exprs and all('job="embedstream-sink"' in e for e in exprs)
    used = {m for e in exprs for m in re.findall(r"embedstream_[a-z_]+", e)}
    known = {n.removesuffix("_bucket") for n in STORE_METRIC_NAMES} | {"embedstream_ready"}
    used = {u.removesuffix("_bucket") for u in used}
    assert used <= known | {"embedstream_consumer_lag"}, used - known
    assert "embedstream_store_writable" in used and "embedstream_store_rows_upserted_total" in used


def _documents_by_kind(path: Path) -> dict[str, Any]:
    docs = _load_all_yaml(path)
    by_kind = {doc["kind"]: doc for doc in docs}
    assert len(by_kind) == len(docs), f"several documents of one kind in {path.name}"
    return by_kind


def test_the_online_lane_runs_serve_replicas_on_its_own_port_with_keys_from_a_secret(
    k8s: dict[str, Any],
) -> None:
    online = _documents_by_kind(ROOT / "ops" / "k8s" / "online.yaml")
    deployment = online["Deployment"]
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert container["args"] == ["serve"]
    env = {e["name"]: e for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["online"] == int(env["EMBEDSTREAM_HTTP_PORT"]["value"]) != ports["metrics"]
    assert env["EMBEDSTREAM_HTTP_HOST"]["value"] == "0.0.0.0"
    keys_file = Path(env["EMBEDSTREAM_HTTP_API_KEYS_FILE"]["value"])
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(keys_file.parent)]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[mount["name"]]["secret"]["secretName"] == "embedstream-online-keys"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    service = online["Service"]
    assert service["spec"]["ports"] == [
        {"name": "online", "port": ports["online"], "targetPort": "online", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # Only the online replicas serve callers: no processor pod is behind the Service.
    processor_labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= processor_labels.items()
    assert "EMBEDSTREAM_HTTP_PORT" not in k8s["ConfigMap"]["data"]
    assert online["PodDisruptionBudget"]["spec"]["selector"] == deployment["spec"]["selector"]


def test_processors_and_online_replicas_draw_on_one_budget_in_the_redis_they_ship_with(
    k8s: dict[str, Any],
) -> None:
    online = _documents_by_kind(ROOT / "ops" / "k8s" / "online.yaml")
    [container] = online["Deployment"]["spec"]["template"]["spec"]["containers"]
    refs = [e["configMapRef"]["name"] for e in container["envFrom"]]
    # One ConfigMap: the same provider, model, key and limits, hence the same budget.
    assert refs == [k8s["ConfigMap"]["metadata"]["name"]]
    key = {e["name"]: e for e in container["env"]}["OPENAI_API_KEY"]
    assert key["valueFrom"] == _container(k8s)["env"][0]["valueFrom"]
    url = k8s["ConfigMap"]["data"]["EMBEDSTREAM_BUDGET_URL"]
    settings = load_settings(env=k8s["ConfigMap"]["data"])
    assert settings.budget_url == url
    redis = _documents_by_kind(ROOT / "ops" / "k8s" / "redis.yaml")
    host, port = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/\d+", url).groups()  # type: ignore[union-attr]
    assert redis["Service"]["metadata"]["name"] == host
    assert redis["Service"]["spec"]["ports"][0]["port"] == int(port)
    assert redis["Service"]["spec"]["selector"].items() <= (
        redis["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    )


def test_compose_processors_share_the_budget_in_the_compose_redis(
    services: dict[str, Any],
) -> None:
    env = _environment(services["processor"])
    assert env["EMBEDSTREAM_BUDGET_URL"] == "redis://redis:6379/0"
    assert services["processor"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "ports" not in services["redis"]  # nothing outside the compose network needs it


def test_the_image_and_compose_publish_the_online_port_off_by_default(
    services: dict[str, Any],
) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "EXPOSE 9464 8080" in dockerfile
    processor = services["processor"]
    assert "127.0.0.1:8080:8080" in processor["ports"]
    env = processor["environment"]
    assert env["EMBEDSTREAM_HTTP_PORT"] == "${EMBEDSTREAM_HTTP_PORT:-0}"  # off unless asked
    assert env["EMBEDSTREAM_HTTP_API_KEYS"] == "${EMBEDSTREAM_HTTP_API_KEYS:-}"  # from the shell


def _mib(quantity: str) -> float:
    """A Kubernetes memory quantity (``320Mi``, ``1Gi``) in MiB."""
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)
