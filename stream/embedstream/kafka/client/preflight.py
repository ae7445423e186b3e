"""Fail fast, naming the setting: can we reach, trust and log in to the cluster?

aiokafka's bootstrap logs each failure and then raises a bare "Unable to bootstrap", so the
reason (a wrong password, an untrusted CA, TLS spoken to a plaintext port) is lost. This probe
opens one connection per bootstrap server itself, in the same way the clients will (TLS, API
versions, SASL, then a metadata request), and turns what went wrong into one :class:`ConfigError`.

How each mistake shows (Apache Kafka 4.1, aiokafka 0.14):

| mistake | what the client sees |
|---|---|
| wrong SASL password | ``SaslAuthenticationFailed`` with the broker's message |
| broker certificate from an unknown CA | ``SSLCertVerificationError`` (unable to get issuer) |
| connecting by a name the certificate lacks | ``SSLCertVerificationError`` (Hostname mismatch) |
| TLS to a plaintext listener | ``ConnectionResetError`` during the handshake |
| plaintext to a TLS listener | ``KafkaConnectionError`` (closed) on the first request |
| no SASL on a SASL listener | the connection closes on the metadata request |
| SASL on a non-SASL listener | ``IllegalSaslStateError`` |
| no client certificate for mutual TLS | the connection closes right after the handshake |

Unreachable brokers are retried until ``connect_timeout_s`` (a broker may still be starting);
a refusal that cannot change (credentials, certificates) stops at once; an ambiguous one (a
closed connection) stops when it happens twice in a row.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass
from enum import Enum

from aiokafka.conn import create_conn
from aiokafka.errors import (
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.protocol.metadata import MetadataRequest

from embedstream.errors import ConfigError
from embedstream.kafka.client.connection import KafkaConnection

log = logging.getLogger(__name__)

_ATTEMPT_S = 5.0  # one connection attempt; a TLS handshake to a silent port must not hang
_RETRY_S = 0.5
# Handshake alerts that mean "the broker wants (another) client certificate".
_CLIENT_CERT_ALERTS = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_UNKNOWN_CA",
    }
)


class Verdict(Enum):
    RETRY = "retry"  # may clear up: the broker is starting or briefly away
    CONFIRM = "confirm"  # a misconfiguration if it happens again on the next attempt
    FINAL = "final"  # cannot change by waiting


@dataclass(frozen=True)
class Failure:
    setting: str
    problem: str
    verdict: Verdict


async def check_connection(conn: KafkaConnection, *, timeout_s: float, client_id: str) -> None:
    """Return once one bootstrap server accepted us; else raise ConfigError within
    ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    previous: dict[tuple[str, int], Failure] = {}
    last: Failure | None = None
    while True:
        for host, port in conn.hosts():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            failure = await probe(conn, host, port, min(remaining, _ATTEMPT_S), client_id)
            if failure is None:
                return
            again = previous.get((host, port)) == failure
            if failure.verdict is Verdict.FINAL or (failure.verdict is Verdict.CONFIRM and again):
                raise ConfigError(failure.setting, failure.problem)
            previous[(host, port)] = last = failure
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await asyncio.sleep(min(_RETRY_S, remaining))
    assert last is not None
    raise ConfigError(
        last.setting,
        f"{last.problem} (retried for {timeout_s:g}s, connect_timeout_s); check the address "
        "and that the broker is running",
    )


async def probe(
    conn: KafkaConnection, host: str, port: int, timeout_s: float, client_id: str
) -> Failure | None:
    """One connection to one broker, as the clients will make it: None when it worked."""
    phase = "connect"
    try:
        async with asyncio.timeout(timeout_s):
            kafka_conn = await create_conn(
                host,
                port,
                client_id=client_id,
                request_timeout_ms=max(1, int(timeout_s * 1000)),
                **conn.security_options(),
            )
            phase = "metadata"
            try:
                await kafka_conn.send(MetadataRequest([]))
            finally:
                kafka_conn.close()
    except (OSError, KafkaError, TimeoutError) as exc:
        log.debug("preflight %s:%d failed in %s: %r", host, port, phase, exc)
        return classify(conn, f"{host}:{port}", phase, exc)
    return None


def classify(conn: KafkaConnection, where: str, phase: str, exc: BaseException) -> Failure:
    """What a failed connection attempt means, as the setting to fix and a one-line reason.
    Never includes a secret: only names, addresses, paths and the broker's own message."""
    protocol = conn.security_protocol
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or str(exc)
        if "mismatch" in detail.lower():
            return Failure(
                "ssl_check_hostname",
                f"the certificate of {where} is not valid for that name ({detail.rstrip('.')}); "
                "connect by a name the certificate lists, or set ssl_check_hostname=false",
                Verdict.FINAL,
            )
        trusted = f"the CAs in {conn.ssl_cafile}" if conn.ssl_cafile else "the system's CAs"
        return Failure(
            "ssl_cafile",
            f"the certificate of {where} is not signed by {trusted} ({detail})",
            Verdict.FINAL,
        )
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or type(exc).__name__
        if reason in _CLIENT_CERT_ALERTS:
            return _client_certificate(conn, where, f"TLS alert {reason}")
        return Failure(
            "security_protocol",
            f"the TLS handshake with {where} failed ({reason}); is it a TLS listener? "
            f"security_protocol is {protocol}",
            Verdict.CONFIRM,
        )
    if isinstance(exc, SaslAuthenticationFailed):
        oauth = conn.sasl_mechanism == "OAUTHBEARER"
        who = "the token" if oauth else f"user {conn.sasl_username!r}"
        said = exc.args[0] if exc.args else exc
        return Failure(
            "sasl_oauth_token_file" if oauth else "sasl_password",
            f"{where} rejected {who} with {conn.sasl_mechanism}: {said}",
            Verdict.FINAL,
        )
    if isinstance(exc, UnsupportedSaslMechanismError):
        return Failure("sasl_mechanism", f"{where}: {exc.args[0]}", Verdict.FINAL)
    if isinstance(exc, IllegalSaslStateError):
        return Failure(
            "security_protocol",
            f"{where} is not a SASL listener, and security_protocol is {protocol} "
            f"(use {'SSL' if conn.uses_tls else 'PLAINTEXT'})",
            Verdict.FINAL,
        )
    if isinstance(exc, ConnectionRefusedError | socket.gaierror | TimeoutError):
        detail = "no answer" if isinstance(exc, TimeoutError) else _os_reason(exc)
        return Failure(
            "bootstrap_servers", f"no Kafka broker answered at {where} ({detail})", Verdict.RETRY
        )
    if isinstance(exc, KafkaConnectionError) and phase == "connect":
        if not conn.uses_tls:
            return Failure(
                "security_protocol",
                f"{where} closed the connection on the first request: it looks like a TLS "
                f"listener, and security_protocol is {protocol} (use SSL or SASL_SSL)",
                Verdict.CONFIRM,
            )
        return _client_certificate(conn, where, "closed right after the TLS handshake")
    if isinstance(exc, KafkaConnectionError) and not conn.uses_sasl:
        return Failure(
            "security_protocol",
            f"{where} closed the connection instead of answering: the listener probably "
            f"requires SASL, and security_protocol is {protocol} (use SASL_SSL)",
            Verdict.CONFIRM,
        )
    if isinstance(exc, OSError) and phase == "connect" and conn.uses_tls:
        return Failure(
            "security_protocol",
            f"{where} broke off the TLS handshake ({_os_reason(exc)}): it does not look like a "
            f"TLS listener, and security_protocol is {protocol}",
            Verdict.CONFIRM,
        )
    return Failure(
        "bootstrap_servers",
        f"cannot talk to the Kafka broker at {where} ({type(exc).__name__}: {exc})",
        Verdict.RETRY,
    )


def _client_certificate(conn: KafkaConnection, where: str, what: str) -> Failure:
    if conn.ssl_certfile:
        problem = f"{where} did not accept the client certificate {conn.ssl_certfile} ({what})"
    else:
        problem = f"{where} requires a client certificate ({what}); set ssl_certfile"
    return Failure("ssl_certfile", problem, Verdict.CONFIRM)


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name: {exc.strerror}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__
