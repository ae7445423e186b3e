"""A throwaway `redis-server` on loopback, for tests and benchmarks that need a real Redis.

Started on a free port (or a given one, so a test can stop it and start it again where its
clients expect it), with persistence off and a private directory. It speaks to the server in
plain RESP over a socket, so it needs no client library. Debian's `redis-server` package
provides the command (ops/test.sh installs it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

from embedstream.tools.embedded import free_port

START_TIMEOUT_S = 10.0


class RedisUnavailable(RuntimeError):
    """No `redis-server` command, or it did not start."""


def redis_server_command() -> str | None:
    return shutil.which("redis-server")


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="embedstream-redis-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> RedisServer:
        command = redis_server_command()
        if command is None:
            raise RedisUnavailable("redis-server not found (Debian package redis-server)")
        log = (self._dir / "redis.log").open("ab")
        self._process = subprocess.Popen(
            [command, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self._dir), "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                tail = (self._dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RedisUnavailable(f"redis-server exited at start:\n{tail}")
            try:
                if self.command("PING") == "PONG":
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RedisUnavailable(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        """Stop the server (its data is gone: persistence is off); start() brings it back."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (its data is gone; start() brings it back)."""
        if self._process is None:
            return
        self._process.kill()
        self._process.wait()
        self._process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def command(self, *args: str) -> str | int | None:
        """One command, its reply as text (simple and bulk strings), an int, or None."""
        body = b"".join(f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(f"*{len(args)}\r\n".encode() + body)
            reader = sock.makefile("rb")
            return _reply(reader)

    def cpu_seconds(self) -> float:
        """CPU the server has used so far (user + system, from INFO cpu)."""
        info = str(self.command("INFO", "cpu"))
        fields = dict(
            line.split(":", 1) for line in info.splitlines() if ":" in line and line[0] != "#"
        )
        return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def _reply(reader: BinaryIO) -> str | int | None:
    line = reader.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:].decode()
    if kind == b"+":
        return rest
    if kind == b"-":
        raise OSError(f"redis error: {rest}")
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = reader.read(size + 2)
        return data[:-2].decode(errors="replace")
    raise OSError(f"unexpected redis reply {line[:40]!r}")
