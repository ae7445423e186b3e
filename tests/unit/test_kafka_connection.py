"""KafkaConnection: the options every client gets, and certificate problems named by setting."""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

import pytest
from embedstream.errors import ConfigError
from embedstream.kafka.client.connection import (
    KafkaConnection,
    ReloadingSSLContext,
    TokenFileProvider,
    as_connection,
    connection_for,
)
from embedstream.settings import load_settings

from tests.tls import Pem, make_ca, make_cert, need_openssl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    need_openssl()
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca(directory, "ca")
    other = make_ca(directory, "other-ca")
    return {
        "dir": directory,
        "ca": ca,
        "plain": make_cert(directory, ca, "plain"),
        "locked": make_cert(directory, ca, "locked", key_password="canary-key"),
        "other": make_cert(directory, other, "stranger"),
    }


def _tls(**extra: str) -> dict[str, Any]:
    return {"security_protocol": "SSL", **extra}


def test_plaintext_has_no_tls_or_sasl_options() -> None:
    options = connection_for(load_settings(env={})).options()
    assert options == {"bootstrap_servers": "127.0.0.1:9092", "security_protocol": "PLAINTEXT"}
    assert as_connection("h:1") == KafkaConnection("h:1")


def test_sasl_ssl_options_carry_credentials_and_context(pki: dict[str, Any]) -> None:
    settings = load_settings(
        env={},
        overrides={
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "alice",
            "sasl_password": "canary-pw",
            "ssl_cafile": str(pki["ca"].cert),
        },
    )
    conn = connection_for(settings)
    options = conn.options()
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == (
        "alice",
        "canary-pw",
    )
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].check_hostname is True
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert "canary-pw" not in repr(conn)
    assert connection_for(settings) is conn  # one SSL context per settings


async def test_oauth_token_is_read_from_its_file_at_each_login(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    settings = load_settings(
        env={},
        overrides={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_file": str(token),
        },
    )
    provider = KafkaConnection.from_settings(settings).options()["sasl_oauth_token_provider"]
    assert isinstance(provider, TokenFileProvider)
    assert await provider.token() == "first"
    token.write_text("rotated")
    assert await provider.token() == "rotated"


def test_check_hostname_can_be_turned_off(pki: dict[str, Any]) -> None:
    overrides = _tls(ssl_cafile=str(pki["ca"].cert)) | {"ssl_check_hostname": False}
    context = KafkaConnection.from_settings(load_settings(env={}, overrides=overrides)).ssl_context
    assert context is not None and context.check_hostname is False
    assert context.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified


def test_mutual_tls_with_an_encrypted_key(pki: dict[str, Any]) -> None:
    locked: Pem = pki["locked"]
    overrides = _tls(ssl_certfile=str(locked.cert), ssl_keyfile=str(locked.key))
    overrides["ssl_keyfile_password"] = "canary-key"
    assert KafkaConnection.from_settings(load_settings(env={}, overrides=overrides)).ssl_context


def _garbage(pki: dict[str, Any]) -> str:
    path = pki["dir"] / "garbage.pem"
    path.write_text("not a certificate\n")
    return str(path)


CASES = [
    ("garbage CA", lambda p: _tls(ssl_cafile=_garbage(p)), "ssl_cafile"),
    ("not a certificate", lambda p: _tls(ssl_certfile=_garbage(p),
                                         ssl_keyfile=str(p["plain"].key)), "ssl_certfile"),
    ("not a key", lambda p: _tls(ssl_certfile=str(p["plain"].cert),
                                 ssl_keyfile=_garbage(p)), "ssl_keyfile"),
    ("certificate without key", lambda p: _tls(ssl_certfile=str(p["plain"].cert)),
     "ssl_certfile"),
    ("someone else's key", lambda p: _tls(ssl_certfile=str(p["plain"].cert),
                                          ssl_keyfile=str(p["other"].key)), "ssl_keyfile"),
    ("encrypted key, no password", lambda p: _tls(ssl_certfile=str(p["locked"].cert),
                                                  ssl_keyfile=str(p["locked"].key)),
     "ssl_keyfile_password"),
    ("wrong key password", lambda p: _tls(ssl_certfile=str(p["locked"].cert),
                                          ssl_keyfile=str(p["locked"].key),
                                          ssl_keyfile_password="canary-wrong"),
     "ssl_keyfile_password"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "overrides", "setting"), CASES, ids=[c[0] for c in CASES])
def test_certificate_problems_name_the_setting(
    pki: dict[str, Any], case: str, overrides: Any, setting: str
) -> None:
    settings = load_settings(env={}, overrides=overrides(pki))
    with pytest.raises(ConfigError) as info:
        KafkaConnection.from_settings(settings)
    assert info.value.setting == setting, str(info.value)
    assert "canary" not in str(info.value)


def test_only_kafka_clients_module_constructs_aiokafka_clients() -> None:
    # Every client must get the connection's TLS/SASL options: none may be built elsewhere.
    pattern = re.compile(r"AIOKafka(Consumer|Producer|AdminClient)\(")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "stream").rglob("*.py")
        if pattern.search(path.read_text())
        and path != ROOT / "stream/embedstream/kafka/client/clients.py"
    ]
    assert offenders == []
    assert pattern.search((ROOT / "stream/embedstream/kafka/client/clients.py").read_text())


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_every_producer_takes_the_compression_setting(codec: str) -> None:
    from embedstream.kafka.client.clients import make_producer
    from embedstream.settings import load_settings

    producer = make_producer(load_settings(env={}, overrides={"compression_type": codec}))
    assert producer._compression_type == (None if codec == "none" else codec)


def _trusted_ca(context: ssl.SSLContext) -> set[tuple[str, str]]:
    """The subject of the (only) CA the context trusts."""
    subject: tuple[tuple[tuple[str, str], ...], ...] = context.get_ca_certs()[0]["subject"]  # type: ignore[assignment]
    return {name for rdn in subject for name in rdn}


def test_a_rotated_client_certificate_or_ca_is_used_by_the_next_connection(
    pki: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cafile, certfile, keyfile = tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key"
    for source, target in [
        (pki["ca"].cert, cafile),
        (pki["plain"].cert, certfile),
        (pki["plain"].key, keyfile),
    ]:
        target.write_bytes(source.read_bytes())
    files = {"ssl_cafile": str(cafile), "ssl_certfile": str(certfile), "ssl_keyfile": str(keyfile)}
    context = connection_for(load_settings(env={}, overrides=_tls(**files))).ssl_context
    assert isinstance(context, ReloadingSSLContext)
    before = context.current()
    assert context.current() is before  # nothing changed: nothing rebuilt
    assert _trusted_ca(before) == {("commonName", "ca")}
    # A half-done rotation (the new certificate, the old key) keeps the previous context.
    certfile.write_bytes(pki["other"].cert.read_bytes())
    assert context.current() is before
    assert "do not load" in caplog.text
    keyfile.write_bytes(pki["other"].key.read_bytes())
    cafile.write_bytes(pki["dir"].joinpath("other-ca.pem").read_bytes())
    after = context.current()
    assert after is not before
    assert _trusted_ca(after) == {("commonName", "other-ca")}
    # What asyncio calls for every TLS connection, a reconnect of a running client included.
    assert context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="h").context is after
