"""Throwaway PEM certificates for tests, made with the openssl command (never committed)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


def need_openssl() -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(directory: Path, name: str) -> Pem:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-noenc", "-keyout", str(key), "-out", str(cert),
        "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    return Pem(cert, key)


def make_cert(directory: Path, ca: Pem, name: str, *, key_password: str | None = None) -> Pem:
    """A client certificate signed by ``ca``; its key encrypted when a password is given."""
    cert, key, csr = (directory / f"{name}{ext}" for ext in (".pem", ".key", ".csr"))
    protect = ["-passout", f"pass:{key_password}"] if key_password else ["-noenc"]
    _openssl(
        "req", "-newkey", "rsa:2048", *protect, "-keyout", str(key), "-out", str(csr),
        "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    extensions = directory / f"{name}.ext"
    extensions.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-CAcreateserial", "-days", "2", "-out", str(cert), "-extfile", str(extensions),
        cwd=directory,
    )  # fmt: skip
    return Pem(cert, key)
