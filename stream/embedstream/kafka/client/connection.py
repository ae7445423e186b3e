"""How to reach the cluster: bootstrap servers plus TLS and SASL, built once from the settings.

Every aiokafka client embedstream creates (consumer, producer, transactional producers, admin,
the verify reader, the produce/consume tools) takes its connection options from one
:class:`KafkaConnection`, so a secured cluster needs the settings once and nothing can bypass
them. Problems with the certificate files are found here, before any connection, and name the
setting at fault (OpenSSL reports most of them as an anonymous "PEM lib" error).

The certificate files are read again when they change (a rotated client certificate, key or
CA bundle): every new TLS connection, a reconnect of a running client included, checks their
(path, mtime_ns, size) and uses a context built from what they hold now
(:class:`ReloadingSSLContext`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.abc import AbstractTokenProvider

from embedstream.errors import ConfigError
from embedstream.settings import SASL_PROTOCOLS, TLS_PROTOCOLS, Settings

log = logging.getLogger(__name__)


class TokenFileProvider(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka is untyped
    """OAUTHBEARER: the token is whatever the file holds at each login, so a sidecar (or a
    Kubernetes projected token) can rotate it without a restart."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    async def token(self) -> str:
        text = await asyncio.to_thread(self._path.read_text, encoding="utf-8")
        return text.strip()


@dataclass(frozen=True)
class KafkaConnection:
    """The keyword options every aiokafka client needs to reach one cluster. Secrets are kept
    out of ``repr`` (this object shows up in tracebacks and debug logs)."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_oauth_token_file: str | None = None
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    ssl_cafile: str | None = None  # the paths, for messages only: the context holds the rest
    ssl_certfile: str | None = None

    @classmethod
    def plaintext(cls, bootstrap_servers: str) -> KafkaConnection:
        return cls(bootstrap_servers)

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaConnection:
        """Raises ConfigError naming the setting when a certificate or key cannot be used."""
        protocol = settings.security_protocol
        sasl = protocol in SASL_PROTOCOLS
        return cls(
            bootstrap_servers=settings.bootstrap_servers,
            security_protocol=protocol,
            sasl_mechanism=settings.sasl_mechanism,
            sasl_username=settings.sasl_username if sasl else None,
            sasl_password=settings.sasl_password if sasl else None,
            sasl_oauth_token_file=settings.sasl_oauth_token_file if sasl else None,
            ssl_context=ReloadingSSLContext(settings) if protocol in TLS_PROTOCOLS else None,
            ssl_cafile=settings.ssl_cafile,
            ssl_certfile=settings.ssl_certfile,
        )

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in SASL_PROTOCOLS

    def hosts(self) -> list[tuple[str, int]]:
        found = []
        for server in self.bootstrap_servers.split(","):
            host, _, port = server.strip().rpartition(":")
            found.append((host.strip("[]"), int(port)))
        return found

    def options(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaConsumer, AIOKafkaProducer and AIOKafkaAdminClient."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.security_options()}

    def security_options(self) -> dict[str, Any]:
        """The TLS and SASL keyword arguments alone (also what ``aiokafka.conn.create_conn``
        takes)."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.ssl_context is not None:
            options["ssl_context"] = self.ssl_context
        if self.uses_sasl:
            options["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism == "OAUTHBEARER":
                assert self.sasl_oauth_token_file is not None  # validated with the settings
                options["sasl_oauth_token_provider"] = TokenFileProvider(self.sasl_oauth_token_file)
            else:
                options["sasl_plain_username"] = self.sasl_username
                options["sasl_plain_password"] = self.sasl_password
        return options


KafkaTarget = KafkaConnection | str  # a plain bootstrap string means PLAINTEXT (tests, tools)


def as_connection(target: KafkaTarget) -> KafkaConnection:
    return target if isinstance(target, KafkaConnection) else KafkaConnection.plaintext(target)


@functools.lru_cache(maxsize=16)
def connection_for(settings: Settings) -> KafkaConnection:
    """One connection (and one SSL context) per settings object: the exactly-once mode makes a
    producer per input partition, and loading certificates for each would be wasted work. The
    context itself reloads changed certificate files (see :class:`ReloadingSSLContext`)."""
    return KafkaConnection.from_settings(settings)


FileStamp = tuple[tuple[str, int, int] | tuple[str, None, None], ...]


def _stamp(paths: tuple[str, ...]) -> FileStamp:
    found: list[tuple[str, int, int] | tuple[str, None, None]] = []
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            found.append((path, None, None))
        else:
            found.append((path, status.st_mtime_ns, status.st_size))
    return tuple(found)


class ReloadingSSLContext(ssl.SSLContext):
    """The client context of :func:`build_ssl_context`, rebuilt when one of its files changes.

    aiokafka keeps one context per client for its whole life and hands it to asyncio for every
    connection, which calls ``wrap_bio``: that is where the files' (path, mtime_ns, size) are
    compared (a few ``stat`` calls per connection) and, if they changed, a fresh context is
    built and used. Files that do not load (a rotation half done) leave the previous context in
    use, with a warning, and are tried again at the next connection."""

    def __new__(cls, settings: Settings) -> ReloadingSSLContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)

    def __init__(self, settings: Settings) -> None:
        files = (settings.ssl_cafile, settings.ssl_certfile, settings.ssl_keyfile)
        self._settings = settings
        self._files = tuple(f for f in files if f)
        self._stamp = _stamp(self._files)
        self._current = build_ssl_context(settings)  # ConfigError naming the setting
        self.check_hostname = self._current.check_hostname  # what callers may read

    def current(self) -> ssl.SSLContext:
        """The context for a new connection, built from the files as they are now."""
        stamp = _stamp(self._files)
        if stamp != self._stamp:
            try:
                self._current = build_ssl_context(self._settings)
            except ConfigError as exc:
                log.warning("TLS files changed but do not load (%s); keeping the previous", exc)
            else:
                self._stamp = stamp
                log.info("TLS files changed; new connections use them")
        return self._current

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.current().wrap_bio(incoming, outgoing, server_side, server_hostname, session)


def build_ssl_context(settings: Settings) -> ssl.SSLContext:
    """What ``aiokafka.helpers.create_ssl_context`` builds (a client context that verifies the
    broker), in steps, so each failure names its own setting; plus ``ssl_check_hostname``."""
    cafile = settings.ssl_cafile
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    except (ssl.SSLError, OSError) as exc:
        problem = f"cannot load CA certificates from {cafile}: {exc}"
        raise ConfigError("ssl_cafile", problem) from exc
    # Off only on request: without it any certificate the CA signed is accepted for any host.
    context.check_hostname = settings.ssl_check_hostname
    if settings.ssl_certfile:
        _load_client_certificate(context, settings)
    return context


def _load_client_certificate(context: ssl.SSLContext, settings: Settings) -> None:
    certfile = settings.ssl_certfile
    assert certfile is not None
    keyfile = settings.ssl_keyfile or certfile
    cert_text = _read(certfile, "ssl_certfile")
    key_text = cert_text if keyfile == certfile else _read(keyfile, "ssl_keyfile")
    key_setting = "ssl_keyfile" if settings.ssl_keyfile else "ssl_certfile"
    if "-----BEGIN CERTIFICATE-----" not in cert_text:
        raise ConfigError("ssl_certfile", f"{certfile} holds no PEM certificate")
    if "PRIVATE KEY-----" not in key_text:
        raise ConfigError(key_setting, f"{keyfile} holds no PEM private key")
    encrypted = "ENCRYPTED PRIVATE KEY" in key_text or "Proc-Type: 4,ENCRYPTED" in key_text
    password = settings.ssl_keyfile_password
    if encrypted and not password:
        raise ConfigError(
            "ssl_keyfile_password", f"the key in {keyfile} is encrypted, and no password is set"
        )
    try:
        # A callable even without a password: OpenSSL would otherwise prompt on the terminal.
        context.load_cert_chain(certfile, settings.ssl_keyfile, lambda: password or "")
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(key_setting, f"the key in {keyfile} is not {certfile}'s") from exc
        if encrypted:
            raise ConfigError(
                "ssl_keyfile_password", f"cannot decrypt the key in {keyfile}: wrong password?"
            ) from exc
        raise ConfigError("ssl_certfile", f"cannot load {certfile} / {keyfile}: {exc}") from exc


def _read(path: str, setting: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(setting, f"cannot read {path}: {exc.strerror}") from exc
