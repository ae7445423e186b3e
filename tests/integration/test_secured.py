"""A real Apache Kafka with TLS and SASL: the processor and the CLI over each listener, every
everyday misconfiguration failing fast with the setting named, and no secret leaking."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from embedsim import SimulatorConfig, expected_vector
from embedsim.server import SimulatorServer
from embedstream.errors import ConfigError, env_var
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.client.clients import connection_for, producer_for
from embedstream.kafka.client.preflight import check_connection
from embedstream.settings import load_settings
from embedstream.tools.embedded import free_port

from tests.integration.helpers import (
    create_all_topics,
    publish,
    read_topic,
    request,
    running_processor,
    settings_for,
    wait_for_ids,
)
from tests.integration.secured import SecuredBroker, embedstream_cli
from tests.tls import make_ca, need_openssl

# One worker runs them all: the secured broker is a session fixture, started once per worker.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("secured-broker")]

# A misconfiguration must be reported long before connect_timeout_s runs out: the bound is
# far below that timeout but loose enough for a loaded CI machine (a process start alone can
# take seconds there); it proves the failure did not wait for the timeout.
QUICK_S = 45.0
PATIENT = {"EMBEDSTREAM_CONNECT_TIMEOUT_S": "120", "EMBEDSTREAM_METRICS_PORT": "0"}


def _prefix() -> str:
    return f"sec.{uuid.uuid4().hex[:10]}."


@pytest.mark.parametrize(
    ("listener", "delivery"),
    [("SASL_SSL", "at_least_once"), ("SSL", "at_least_once"), ("SASL_SSL", "exactly_once")],
)
async def test_processor_end_to_end(
    secured_broker: SecuredBroker, simulator: SimulatorServer, listener: str, delivery: str
) -> None:
    kafka = secured_broker.connection(listener)
    security = (
        secured_broker.sasl_settings() if listener == "SASL_SSL" else secured_broker.ssl_settings()
    )
    prefix = _prefix()
    settings = settings_for(
        kafka.bootstrap_servers, prefix, simulator.url, delivery=delivery, **security
    )
    await create_all_topics(settings)
    names = topic_names(prefix)
    ids = {f"{listener}-{i}" for i in range(20)}
    async with running_processor(settings):
        await publish(kafka, names.requests_low, [request(i, f"text {i}") for i in sorted(ids)])
        await publish(kafka, names.requests_high, [request("urgent", "now")])
        results = await wait_for_ids(kafka, names.results, ids | {"urgent"}, 60)
    assert set(results) == ids | {"urgent"}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"])
async def test_other_sasl_mechanisms_connect(
    secured_broker: SecuredBroker, tmp_path: Path, mechanism: str
) -> None:
    env = secured_broker.sasl_env() | {"EMBEDSTREAM_SASL_MECHANISM": mechanism}
    if mechanism == "OAUTHBEARER":
        token = tmp_path / "token"
        token.write_text(_unsecured_jwt("embedstream"))
        env = {k: v for k, v in env.items() if "SASL_USERNAME" not in k and "PASSWORD" not in k}
        env["EMBEDSTREAM_SASL_OAUTH_TOKEN_FILE"] = str(token)
    run = await embedstream_cli("topics", "list", env=env)
    assert run.code == 0, run.err


def _unsecured_jwt(subject: str) -> str:
    """A token Kafka's default (unsecured, test-only) OAUTHBEARER validator accepts."""
    import base64

    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(doc)).decode().rstrip("=")

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + 3600})}."


async def test_cli_over_sasl_ssl(secured_broker: SecuredBroker, tmp_path: Path) -> None:
    prefix = _prefix()
    env = secured_broker.sasl_env() | {"EMBEDSTREAM_TOPIC_PREFIX": prefix}
    run = await embedstream_cli("topics", "create", env=env)
    assert run.code == 0 and "6 created" in run.out, run.err
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"id": "s1", "text": "one"}\n{"id": "s2", "text": "two"}\n')
    run = await embedstream_cli("produce", str(lines), "--quiet", env=env)
    assert run.code == 0 and "sent 2 requests" in run.err, run.err
    kafka = secured_broker.connection("SASL_SSL")
    names = topic_names(prefix)
    requests = await read_topic(kafka, names.requests_low, idle_s=0.2)
    assert sorted(orjson.loads(r.value)["id"] for r in requests) == ["s1", "s2"]
    await publish(kafka, names.results, [(b"s1", b'{"id": "s1", "embedding": [0.5]}')])
    run = await embedstream_cli("consume", "--from-beginning", "--limit", "1", env=env)
    assert run.code == 0, run.err
    assert [orjson.loads(line) for line in run.out.splitlines()] == [
        {"id": "s1", "embedding": [0.5]}
    ]
    run = await embedstream_cli("verify", "--json", "--timeout", "30", env=env)
    assert run.code == 1, run.err  # it read everything: s2 has no outcome yet
    assert orjson.loads(run.out)["ok"] is False


# --------------------------------------------------------------------------- misconfigurations


def _other_ca(tmp_path: Path) -> str:
    need_openssl()
    return str(make_ca(tmp_path, "stranger-ca").cert)


Case = Callable[[SecuredBroker, Path], dict[str, str]]
MISTAKES: list[tuple[str, Case, str]] = [
    ("wrong password", lambda b, _: b.sasl_env() | {
        "EMBEDSTREAM_SASL_PASSWORD_FILE": "", "EMBEDSTREAM_SASL_PASSWORD": "canary-wrong"},
     "sasl_password"),
    ("untrusted CA", lambda b, t: b.sasl_env() | {"EMBEDSTREAM_SSL_CAFILE": _other_ca(t)},
     "ssl_cafile"),
    ("system CAs only", lambda b, _: b.sasl_env() | {"EMBEDSTREAM_SSL_CAFILE": ""},
     "ssl_cafile"),
    ("name not in certificate", lambda b, _: b.sasl_env() | {
        "EMBEDSTREAM_BOOTSTRAP_SERVERS": b.sasl_ssl.replace("127.0.0.1", "localhost")},
     "ssl_check_hostname"),
    ("TLS to the plaintext port", lambda b, _: b.sasl_env() | {
        "EMBEDSTREAM_BOOTSTRAP_SERVERS": b.plaintext}, "security_protocol"),
    ("plaintext to the TLS port", lambda b, _: {"EMBEDSTREAM_BOOTSTRAP_SERVERS": b.sasl_ssl},
     "security_protocol"),
    ("no SASL on the SASL port", lambda b, _: b.ssl_env() | {
        "EMBEDSTREAM_BOOTSTRAP_SERVERS": b.sasl_ssl}, "security_protocol"),
    ("SASL on the mutual-TLS port", lambda b, _: b.sasl_env() | b.ssl_env() | {
        "EMBEDSTREAM_SECURITY_PROTOCOL": "SASL_SSL"}, "security_protocol"),
    ("no client certificate", lambda b, _: {**b.ssl_env(), "EMBEDSTREAM_SSL_CERTFILE": "",
                                            "EMBEDSTREAM_SSL_KEYFILE": "",
                                            "EMBEDSTREAM_SSL_KEYFILE_PASSWORD_FILE": ""},
     "ssl_certfile"),
    ("wrong key password", lambda b, _: b.ssl_env() | {
        "EMBEDSTREAM_SSL_KEYFILE_PASSWORD_FILE": "",
        "EMBEDSTREAM_SSL_KEYFILE_PASSWORD": "canary-wrong"}, "ssl_keyfile_password"),
    ("missing CA file", lambda b, t: b.sasl_env() | {
        "EMBEDSTREAM_SSL_CAFILE": str(t / "absent-ca.pem")}, "ssl_cafile"),
    ("missing certificate file", lambda b, t: b.ssl_env() | {
        "EMBEDSTREAM_SSL_CERTFILE": str(t / "absent.pem")}, "ssl_certfile"),
]  # fmt: skip


def _assert_fails_fast(run: Any, setting: str) -> None:
    assert run.code == 2, (run.code, run.err)
    assert f"setting {setting} ({env_var(setting)})" in run.err, run.err
    assert "Traceback" not in run.err, run.err
    assert "canary" not in run.err + run.out
    assert len(run.err.strip().splitlines()) == 1, run.err
    assert run.seconds < QUICK_S, run.seconds


@pytest.mark.parametrize(("case", "mistake", "setting"), MISTAKES, ids=[m[0] for m in MISTAKES])
async def test_run_fails_fast_naming_the_setting(
    secured_broker: SecuredBroker, tmp_path: Path, case: str, mistake: Case, setting: str
) -> None:
    env = PATIENT | mistake(secured_broker, tmp_path)
    run = await embedstream_cli("run", "--topic-prefix", _prefix(), env=env)
    _assert_fails_fast(run, setting)


@pytest.mark.parametrize(
    "command",
    [["topics", "create"], ["produce", "--quiet"], ["consume", "--limit", "1"], ["verify"]],
    ids=lambda c: c[0],
)
async def test_every_command_fails_fast_on_a_wrong_password(
    secured_broker: SecuredBroker, command: list[str]
) -> None:
    env = PATIENT | secured_broker.sasl_env()
    env |= {"EMBEDSTREAM_SASL_PASSWORD_FILE": "", "EMBEDSTREAM_SASL_PASSWORD": "canary-wrong"}
    run = await embedstream_cli(*command, env=env, stdin=b'{"id": "x", "text": "y"}\n')
    _assert_fails_fast(run, "sasl_password")


async def test_a_ca_file_rewritten_in_place_is_used_by_the_next_connection(
    secured_broker: SecuredBroker, tmp_path: Path
) -> None:
    """Certificate rotation without a restart: the SSL context used to be built once per
    process, so a CA bundle (or client certificate) replaced in place was ignored until then."""
    cafile = tmp_path / "ca.pem"
    shutil.copyfile(_other_ca(tmp_path), cafile)
    overrides = {"bootstrap_servers": secured_broker.sasl_ssl, **secured_broker.sasl_settings()}
    settings = load_settings(env={}, overrides=overrides | {"ssl_cafile": str(cafile)})
    with pytest.raises(ConfigError, match="ssl_cafile"):
        await check_connection(connection_for(settings), timeout_s=30, client_id="rotation")
    shutil.copyfile(secured_broker.ca, cafile)  # the same path, now the broker's CA
    connection = connection_for(settings)  # the same settings: the same cached connection
    await check_connection(connection, timeout_s=30, client_id="rotation")
    producer = producer_for(connection)
    await producer.start()  # a real client trusts the broker now too
    try:
        assert await producer.client.fetch_all_metadata() is not None
    finally:
        await producer.stop()


# --------------------------------------------------------------------------- canaries


async def test_no_secret_leaks_from_a_running_processor(
    secured_broker: SecuredBroker, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """Every secret set at once, DEBUG logs on: none appears in the logs, /metrics, /readyz,
    the results or the dead letters."""
    api_key = tmp_path / "api-key"
    api_key.write_text(f"sk-canary-{uuid.uuid4().hex}\n")
    url_secret = f"canary-url-{uuid.uuid4().hex[:8]}"
    base_url = simulator.url.replace("http://", f"http://gateway:{url_secret}@")
    gateway_secret = f"canary-gateway-{uuid.uuid4().hex[:8]}"
    headers_file = tmp_path / "extra-headers.json"
    headers_file.write_text(f'{{"X-Gateway-Key": "{gateway_secret}"}}\n')
    prefix, port = _prefix(), free_port()
    env = secured_broker.sasl_env() | {
        # A client certificate is optional on the SASL_SSL listener: set one, so that the key
        # password is live as well.
        "EMBEDSTREAM_SSL_CERTFILE": str(secured_broker.client_cert),
        "EMBEDSTREAM_SSL_KEYFILE": str(secured_broker.client_key),
        "EMBEDSTREAM_SSL_KEYFILE_PASSWORD_FILE": str(secured_broker.client_key_password_file),
        "EMBEDSTREAM_API_KEY_FILE": str(api_key),
        "EMBEDSTREAM_BASE_URL": base_url,
        "EMBEDSTREAM_EXTRA_HEADERS_FILE": str(headers_file),
        "EMBEDSTREAM_TOPIC_PREFIX": prefix,
        "EMBEDSTREAM_GROUP_ID": prefix + "group",
        "EMBEDSTREAM_METRICS_PORT": str(port),
        "EMBEDSTREAM_LOG_LEVEL": "DEBUG",
    }
    secrets = [
        secured_broker.password,
        secured_broker.key_password,
        api_key.read_text().strip(),
        url_secret,
        gateway_secret,
    ]
    kafka = secured_broker.connection("SASL_SSL")
    assert (await embedstream_cli("topics", "create", env=env)).code == 0
    names = topic_names(prefix)
    log = tmp_path / "run.log"  # a file, not a pipe: DEBUG output must never block the process
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", "run",
            stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **env},
        )  # fmt: skip
        try:
            await publish(
                kafka, names.requests_low, [request("ok-1", "fine"), (b"bad", b"{not json")]
            )
            await wait_for_ids(kafka, names.results, {"ok-1"}, 60)
            pages = [await _get(port, "/metrics"), await _get(port, "/readyz")]
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
    output = log.read_text(errors="replace")
    assert proc.returncode == 0, output[-2000:]
    dead = await read_topic(kafka, names.dead_letters, idle_s=0.2)
    results = await read_topic(kafka, names.results, idle_s=0.2)
    assert len(dead) == 1 and len(results) == 1
    records = [(r.key, r.value, r.headers) for r in dead + results]
    everything = output + "".join(pages) + repr(records)
    assert "DEBUG" in output  # the logs were verbose
    for secret in secrets:
        assert secret not in everything


async def _get(port: int, path: str) -> str:
    url = f"http://127.0.0.1:{port}{path}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


# --------------------------------------------------------------------------- Azure, env only

PROVIDERS_PAGE = Path(__file__).parents[2] / "docs" / "operations" / "providers.md"
AZURE_SECTION = "## Azure OpenAI on a managed Kafka cluster"
# What the test sets beyond the page's variables: the private CA of the test broker, and a
# topic prefix, group, metrics port and log level of its own.
PLUMBING = {
    "EMBEDSTREAM_SSL_CAFILE", "EMBEDSTREAM_TOPIC_PREFIX", "EMBEDSTREAM_GROUP_ID",
    "EMBEDSTREAM_METRICS_PORT", "EMBEDSTREAM_LOG_LEVEL",
}  # fmt: skip


def _documented_variables(section: str) -> list[str]:
    """The variables the `export` lines of the providers page set in a section's first shell
    block."""
    text = PROVIDERS_PAGE.read_text(encoding="utf-8")
    body = text[text.index(section) :]
    block = body[body.index("```sh") : body.index("```", body.index("```sh") + 5)]
    return [line.split()[1].split("=")[0] for line in block.splitlines()
            if line.startswith("export ")]  # fmt: skip


async def test_azure_deployment_on_sasl_ssl_by_the_documented_environment_alone(
    secured_broker: SecuredBroker, tmp_path: Path
) -> None:
    """The docs' Azure section (Providers), variable for variable, against the SASL_SSL listener
    and the simulator's azure flavor: `topics create` and `run` give results, the calls go to the
    deployment URL with the key in `api-key`, and the key (and a gateway header) never show."""
    model = "text-embedding-3-small"
    azure_key = f"azure-canary-{uuid.uuid4().hex}"
    key_file = tmp_path / "azure-key"
    key_file.write_text(azure_key + "\n")
    gateway_secret = f"gateway-canary-{uuid.uuid4().hex[:12]}"
    prefix, port = _prefix(), free_port()
    config = SimulatorConfig(flavor="azure", auth_key=azure_key, base_ms=1, record_calls=True)
    async with SimulatorServer(config) as azure:
        env = secured_broker.sasl_env() | {
            "EMBEDSTREAM_PROVIDER_PROFILE": "azure",
            "EMBEDSTREAM_AZURE_ENDPOINT": azure.root_url,
            "EMBEDSTREAM_AZURE_DEPLOYMENT": model,
            "EMBEDSTREAM_API_KEY_FILE": str(key_file),
            "EMBEDSTREAM_MODEL": model,
            "EMBEDSTREAM_TOPIC_PREFIX": prefix,
            "EMBEDSTREAM_GROUP_ID": prefix + "group",
            "EMBEDSTREAM_METRICS_PORT": str(port),
            "EMBEDSTREAM_LOG_LEVEL": "DEBUG",
        }
        documented = set(_documented_variables(AZURE_SECTION))
        assert documented <= set(env), documented - set(env)
        assert set(env) - documented <= PLUMBING
        env["EMBEDSTREAM_EXTRA_HEADERS"] = f'{{"X-Gateway-Key": "{gateway_secret}"}}'
        created = await embedstream_cli("topics", "create", env=env)
        assert created.code == 0 and "6 created" in created.out, created.err
        kafka = secured_broker.connection("SASL_SSL")
        names = topic_names(prefix)
        ids = {f"az-{i}" for i in range(30)}
        log = tmp_path / "run.log"
        with log.open("wb") as sink:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "embedstream.cli", "run",
                stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **env},
            )  # fmt: skip
            try:
                texts = {i: f"azure text {i}" for i in sorted(ids)}
                await publish(kafka, names.requests_low, [request(i, t) for i, t in texts.items()])
                await publish(kafka, names.requests_low, [(b"bad", b"{not json")])
                results = await wait_for_ids(kafka, names.results, ids, 60)
                pages = [await _get(port, "/metrics"), await _get(port, "/readyz")]
            finally:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 60)
    output = log.read_text(errors="replace")
    assert proc.returncode == 0, output[-2000:]
    assert set(results) == ids
    for rid, [result] in results.items():
        assert result["embedding"] == expected_vector(model, texts[rid], 256)
    served = [c for c in azure.calls if c.status == 200]
    assert served and all(
        c.path == f"/openai/deployments/{model}/embeddings?api-version=2024-10-21"
        and c.headers["api-key"] == azure_key
        and c.headers["x-gateway-key"] == gateway_secret
        for c in served
    )
    dead = await read_topic(kafka, names.dead_letters, idle_s=0.2)
    everything = output + "".join(pages) + repr([(r.key, r.value, r.headers) for r in dead])
    assert "DEBUG" in output and len(dead) == 1
    for secret in (azure_key, gateway_secret, secured_broker.password):
        assert secret not in everything
