"""A broker of a test's own (Apache Kafka via ops/kafka/kafka.sh) that the test may stop,
kill and restart without disturbing the shared one. Slow to start (seconds): use sparingly."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "ops" / "kafka" / "kafka.sh"
# Below Linux's ephemeral range (32768-60999): a broker that a test stops or kills gets its
# port back on restart, where a port from bind(0) could meanwhile be handed to any client
# socket of a test running in parallel ("port is taken by another process" in a CI run).
_STABLE_PORTS = range(20_000, 32_000)


def stable_port() -> int:
    """A free port no ephemeral allocation will take while it is briefly unbound."""
    rng = random.Random()
    for _ in range(200):
        port = rng.choice(_STABLE_PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


class PrivateBroker:
    def __init__(self) -> None:
        self.port = stable_port()
        self.controller_port = stable_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="embedstream-private-kafka-"))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _run(self, command: str, timeout_s: float = 120) -> str:
        env = {
            **os.environ,
            "EMBEDSTREAM_KAFKA_PORT": str(self.port),
            "EMBEDSTREAM_KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "EMBEDSTREAM_KAFKA_DIR": str(self.data_dir / "kafka"),
            "EMBEDSTREAM_PYTHON": sys.executable,
        }
        proc = await asyncio.create_subprocess_exec(
            "bash", str(SCRIPT), command, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka.sh {command} failed:\n{out.decode()[-3000:]}")
        return out.decode()

    async def start(self) -> None:
        await self._run("start")

    async def stop(self) -> None:
        await self._run("stop")

    async def kill(self) -> None:
        await self._run("kill")

    async def remove(self) -> None:
        try:
            await self._run("kill")
        finally:
            shutil.rmtree(self.data_dir, ignore_errors=True)
