"""A throwaway PostgreSQL with pgvector, for the RAG demo, tests and benchmarks.

The ``pgserver`` wheel ships PostgreSQL 16 and pgvector; :func:`start_postgres` initialises a
cluster in a directory of its own and starts it on a unix socket (about a second; as root,
pgserver runs the server as a user of its own), or on 127.0.0.1 too for a client that only
speaks TCP (a JDBC driver). A tool: the demo uses it, and the test kit
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

    dsn: str  # a unix-socket URI, no password (with tcp_port, a TCP one)
    directory: Path
    _server: Any
    _owns_directory: bool
    tcp_port: int | None = None

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


def start_postgres(
    directory: Path | str | None = None, *, tcp_port: int | None = None
) -> PostgresServer:
    """Start a server whose data lives in ``directory`` (a new temporary one by default); with
    ``tcp_port``, listening on 127.0.0.1 at that port too (trusting local connections)."""
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
    found = PostgresServer(
        dsn=server.get_uri(), directory=path, _server=server, _owns_directory=owns
    )
    if tcp_port is not None:
        try:
            _listen_on_loopback(found, tcp_port)
        except Exception as exc:
            found.stop()
            raise PostgresUnavailable(
                f"PostgreSQL did not listen on port {tcp_port}: {exc}"
            ) from exc
    return found


def _listen_on_loopback(found: PostgresServer, port: int) -> None:
    """Restart the server listening on 127.0.0.1:port (pgserver starts it with no TCP at all,
    a command-line option a configuration file cannot override), trusting loopback clients."""
    server = found._server
    hba = found.directory / "pg_hba.conf"
    hba.write_text(hba.read_text() + "\nhost all all 127.0.0.1/32 trust\n")
    socket_dir = server.get_postmaster_info().socket_dir
    options = f"-h 127.0.0.1 -p {port} -k {socket_dir}"
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]  # made at import
    from pgserver.utils import PostmasterInfo

    args = ["-w", "-o", options, "-l", str(found.directory / "log"), "restart"]
    pg_ctl(args, pgdata=server.pgdata, user=server.system_user, timeout=30)
    # pgserver stops the server it knows at cleanup: tell it the restarted one (its handle
    # would otherwise name the old postmaster's pid, which it kills when the stop fails).
    server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)
    found.tcp_port = port
    found.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
