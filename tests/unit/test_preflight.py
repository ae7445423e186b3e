"""The broker preflight: each way a connection fails maps to the setting to fix."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
from aiokafka.errors import (
    IllegalSaslStateError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from embedstream.errors import ConfigError
from embedstream.kafka.client import preflight
from embedstream.kafka.client.connection import KafkaConnection
from embedstream.kafka.client.preflight import Failure, Verdict, check_connection, classify

PLAIN = KafkaConnection("b:9092")
SSL = KafkaConnection("b:9093", security_protocol="SSL", ssl_cafile="/ca.pem")
SASL = KafkaConnection(
    "b:9094",
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="alice",
    sasl_password="canary-pw",
)
OAUTH = KafkaConnection("b:9094", security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER")


def _verify_error(message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    exc.verify_message = message
    return exc


def _ssl_error(reason: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, reason)
    exc.reason = reason
    return exc


CASES = [
    ("wrong password", SASL, "connect",
     SaslAuthenticationFailed("Authentication failed due to invalid credentials"),
     "sasl_password", Verdict.FINAL, "user 'alice'"),
    ("token refused", OAUTH, "connect", SaslAuthenticationFailed("bad token"),
     "sasl_oauth_token_file", Verdict.FINAL, "the token"),
    ("mechanism off", SASL, "connect", UnsupportedSaslMechanismError("offers PLAIN"),
     "sasl_mechanism", Verdict.FINAL, "offers PLAIN"),
    ("unknown CA", SSL, "connect", _verify_error("unable to get local issuer certificate"),
     "ssl_cafile", Verdict.FINAL, "/ca.pem"),
    ("system CAs", SASL, "connect", _verify_error("self-signed certificate in chain"),
     "ssl_cafile", Verdict.FINAL, "the system's CAs"),
    ("hostname", SSL, "connect", _verify_error("Hostname mismatch, not valid for 'x'."),
     "ssl_check_hostname", Verdict.FINAL, "ssl_check_hostname=false"),
    ("client cert alert", SSL, "connect", _ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED"),
     "ssl_certfile", Verdict.CONFIRM, "set ssl_certfile"),
    ("TLS to plaintext", SSL, "connect", ConnectionResetError(104, "Connection reset"),
     "security_protocol", Verdict.CONFIRM, "not look like a TLS listener"),
    ("TLS garbage", SASL, "connect", _ssl_error("WRONG_VERSION_NUMBER"),
     "security_protocol", Verdict.CONFIRM, "WRONG_VERSION_NUMBER"),
    ("plaintext to TLS", PLAIN, "connect", KafkaConnectionError("Connection at b:9092 closed"),
     "security_protocol", Verdict.CONFIRM, "use SSL or SASL_SSL"),
    ("no client cert", SSL, "connect", KafkaConnectionError("closed"),
     "ssl_certfile", Verdict.CONFIRM, "requires a client certificate"),
    ("SASL listener", SSL, "metadata", KafkaConnectionError("closed"),
     "security_protocol", Verdict.CONFIRM, "requires SASL"),
    ("not SASL", SASL, "connect", IllegalSaslStateError(),
     "security_protocol", Verdict.FINAL, "not a SASL listener"),
    ("refused", PLAIN, "connect", ConnectionRefusedError(111, "Connect call failed"),
     "bootstrap_servers", Verdict.RETRY, "connection refused"),
    ("dns", PLAIN, "connect", socket.gaierror(-2, "Name or service not known"),
     "bootstrap_servers", Verdict.RETRY, "resolve"),
    ("silent", SSL, "connect", TimeoutError(),
     "bootstrap_servers", Verdict.RETRY, "no answer"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "conn", "phase", "exc", "setting", "verdict", "says"), CASES, ids=[c[0] for c in CASES]
)
def test_classify(
    case: str,
    conn: KafkaConnection,
    phase: str,
    exc: BaseException,
    setting: str,
    verdict: Verdict,
    says: str,
) -> None:
    failure = classify(conn, "b:1", phase, exc)
    assert (failure.setting, failure.verdict) == (setting, verdict), failure.problem
    assert says in failure.problem
    assert "canary" not in failure.problem
    assert "\n" not in failure.problem


def _scripted(monkeypatch: pytest.MonkeyPatch, failures: list[Failure | None]) -> list[str]:
    calls: list[str] = []

    async def probe(
        conn: KafkaConnection, host: str, port: int, timeout_s: float, client_id: str
    ) -> Failure | None:
        calls.append(f"{host}:{port}")
        return failures.pop(0) if failures else None

    monkeypatch.setattr(preflight, "probe", probe)
    monkeypatch.setattr(preflight, "_RETRY_S", 0.001)
    return calls


RETRY = Failure("bootstrap_servers", "no answer", Verdict.RETRY)
CONFIRM = Failure("security_protocol", "closed", Verdict.CONFIRM)
FINAL = Failure("sasl_password", "rejected", Verdict.FINAL)


async def test_a_final_failure_stops_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted(monkeypatch, [FINAL])
    with pytest.raises(ConfigError, match="setting sasl_password"):
        await check_connection(PLAIN, timeout_s=30, client_id="t")
    assert len(calls) == 1


async def test_an_ambiguous_failure_stops_when_it_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted(monkeypatch, [CONFIRM, CONFIRM])
    with pytest.raises(ConfigError, match="setting security_protocol"):
        await check_connection(PLAIN, timeout_s=30, client_id="t")
    assert len(calls) == 2


async def test_unreachable_brokers_are_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted(monkeypatch, [RETRY, CONFIRM, RETRY, None])
    await check_connection(PLAIN, timeout_s=30, client_id="t")
    assert len(calls) == 4


async def test_any_bootstrap_server_will_do(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted(monkeypatch, [RETRY, None])
    await check_connection(KafkaConnection("a:1, b:2"), timeout_s=30, client_id="t")
    assert calls == ["a:1", "b:2"]


async def test_giving_up_says_how_long_it_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted(monkeypatch, [RETRY] * 10_000)
    with pytest.raises(
        ConfigError, match=r"no answer \(retried for 0.05s, connect_timeout_s\); check the address"
    ):
        await check_connection(PLAIN, timeout_s=0.05, client_id="t")


async def test_the_stated_timeout_is_the_time_spent_retrying() -> None:
    """Against a port nothing listens on (refused at once), the message's "retried for 1s"
    is true: the probe kept trying that long, not one attempt and a claim."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ConfigError, match=r"\(retried for 1s, connect_timeout_s\)"):
        await check_connection(KafkaConnection(f"127.0.0.1:{port}"), timeout_s=1.0, client_id="t")
    assert loop.time() - started >= 1.0
