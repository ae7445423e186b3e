"""A throwaway PostgreSQL with pgvector, for the RAG demo, tests and benchmarks.

The ``pgserver`` wheel ships PostgreSQL 16 and pgvector; :func:`start_postgres` initialises a
cluster in a directory of its own and starts it on a unix socket (about a second; as root,
pgserver runs the server as a user of its own). A tool: the demo uses it, and the test kit
(``embedstream.testing.postgres``) re-exports it; the store writer itself takes a DSN.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class PostgresUnavailable(RuntimeError):
    """The ``pgserver`` package is not installed, or its server did not start."""


@dataclass(slots=True)
class PostgresServer:
    """A running throwaway server; ``stop()`` stops it and deletes its data."""

    dsn: str  # a unix-socket URI, no password
    directory: Path
    _server: Any
    _owns_directory: bool

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_postgres(directory: Path | str | None = None) -> PostgresServer:
    """Start a server whose data lives in ``directory`` (a new temporary one by default)."""
    with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset, /tmp is used
        warnings.simplefilter("ignore")
        try:
            from pgserver.postgres_server import get_server
        except ImportError:
            raise PostgresUnavailable(
                "a local PostgreSQL needs pgserver: pip install pgserver (or embedstream[dev])"
            ) from None
    # pgserver logs every pg_ctl command it runs, with its whole output, at INFO.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    owns = directory is None
    path = Path(tempfile.mkdtemp(prefix="embedstream-pg-") if directory is None else directory)
    try:
        with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset, /tmp is used
            warnings.simplefilter("ignore")
            server = get_server(path, cleanup_mode="stop")
    except Exception as exc:
        if owns:
            shutil.rmtree(path, ignore_errors=True)
        raise PostgresUnavailable(f"pgserver did not start in {path}: {exc}") from exc
    return PostgresServer(
        dsn=server.get_uri(), directory=path, _server=server, _owns_directory=owns
    )
