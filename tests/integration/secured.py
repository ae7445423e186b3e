"""The secured broker of the TLS/SASL tests: ops/kafka/kafka.sh with EMBEDSTREAM_KAFKA_SECURED=1
(a SASL_SSL listener with SCRAM users, an SSL listener with mutual TLS, a throwaway CA), started
once per session on free ports, or the one `EMBEDSTREAM_TEST_SECURED_ENV` (its secured.env)
points at."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedstream.kafka.client.clients import KafkaConnection, connection_for
from embedstream.settings import load_settings
from embedstream.tools.embedded import free_port

SCRIPT = Path(__file__).parents[2] / "ops" / "kafka" / "kafka.sh"


@dataclass(frozen=True)
class SecuredBroker:
    plaintext: str
    sasl_ssl: str
    ssl: str
    ca: Path
    client_cert: Path
    client_key: Path
    client_key_password_file: Path
    username: str
    password_file: Path

    @classmethod
    def from_env_file(cls, path: Path) -> SecuredBroker:
        values = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        return cls(
            plaintext=values["plaintext_bootstrap"],
            sasl_ssl=values["sasl_ssl_bootstrap"],
            ssl=values["ssl_bootstrap"],
            ca=Path(values["ssl_cafile"]),
            client_cert=Path(values["ssl_certfile"]),
            client_key=Path(values["ssl_keyfile"]),
            client_key_password_file=Path(values["ssl_keyfile_password_file"]),
            username=values["sasl_username"],
            password_file=Path(values["sasl_password_file"]),
        )

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    @property
    def key_password(self) -> str:
        return self.client_key_password_file.read_text().strip()

    def sasl_settings(self, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
        """Setting overrides for the SASL_SSL listener."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_username": self.username,
            "sasl_password": self.password,
            "ssl_cafile": str(self.ca),
        }

    def ssl_settings(self) -> dict[str, Any]:
        """Setting overrides for the mutual-TLS SSL listener."""
        return {
            "security_protocol": "SSL",
            "ssl_cafile": str(self.ca),
            "ssl_certfile": str(self.client_cert),
            "ssl_keyfile": str(self.client_key),
            "ssl_keyfile_password": self.key_password,
        }

    def sasl_env(self) -> dict[str, str]:
        """The environment a user would set for the SASL_SSL listener (password from a file)."""
        return {
            "EMBEDSTREAM_BOOTSTRAP_SERVERS": self.sasl_ssl,
            "EMBEDSTREAM_SECURITY_PROTOCOL": "SASL_SSL",
            "EMBEDSTREAM_SASL_MECHANISM": "SCRAM-SHA-512",
            "EMBEDSTREAM_SASL_USERNAME": self.username,
            "EMBEDSTREAM_SASL_PASSWORD_FILE": str(self.password_file),
            "EMBEDSTREAM_SSL_CAFILE": str(self.ca),
        }

    def ssl_env(self) -> dict[str, str]:
        return {
            "EMBEDSTREAM_BOOTSTRAP_SERVERS": self.ssl,
            "EMBEDSTREAM_SECURITY_PROTOCOL": "SSL",
            "EMBEDSTREAM_SSL_CAFILE": str(self.ca),
            "EMBEDSTREAM_SSL_CERTFILE": str(self.client_cert),
            "EMBEDSTREAM_SSL_KEYFILE": str(self.client_key),
            "EMBEDSTREAM_SSL_KEYFILE_PASSWORD_FILE": str(self.client_key_password_file),
        }

    def connection(self, listener: str) -> KafkaConnection:
        if listener == "SASL_SSL":
            overrides = {"bootstrap_servers": self.sasl_ssl, **self.sasl_settings()}
        else:
            overrides = {"bootstrap_servers": self.ssl, **self.ssl_settings()}
        return connection_for(load_settings(env={}, overrides=overrides))


class SecuredBrokerProcess:
    """Starts and removes a secured broker of the session's own."""

    def __init__(self) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="embedstream-secured-kafka-"))
        self.env = {
            **os.environ,
            "EMBEDSTREAM_KAFKA_SECURED": "1",
            "EMBEDSTREAM_KAFKA_PORT": str(free_port()),
            "EMBEDSTREAM_KAFKA_CONTROLLER_PORT": str(free_port()),
            "EMBEDSTREAM_KAFKA_SASL_SSL_PORT": str(free_port()),
            "EMBEDSTREAM_KAFKA_SSL_PORT": str(free_port()),
            "EMBEDSTREAM_KAFKA_DIR": str(self.data_dir / "kafka"),
            "EMBEDSTREAM_PYTHON": sys.executable,
        }

    def start(self) -> SecuredBroker:
        out = self._run("start")
        [line] = [ln for ln in out.splitlines() if ln.startswith("secured=")]
        return SecuredBroker.from_env_file(Path(line.removeprefix("secured=")))

    def remove(self) -> None:
        try:
            self._run("kill")
        finally:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _run(self, command: str) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), command],
            env=self.env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"kafka.sh {command} failed:\n{(done.stdout + done.stderr)[-3000:]}")
        return done.stdout


@dataclass(frozen=True)
class CliRun:
    code: int
    out: str
    err: str
    seconds: float


async def embedstream_cli(
    *args: str, env: dict[str, str], stdin: bytes | None = None, limit_s: float = 120
) -> CliRun:
    """`python -m embedstream.cli ...` with the test suite's environment plus ``env``."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "embedstream.cli", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, **env},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), limit_s)
    assert proc.returncode is not None
    return CliRun(proc.returncode, out.decode(), err.decode(), time.monotonic() - started)
