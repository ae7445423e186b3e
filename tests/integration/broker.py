"""A broker of a test's own (Apache Kafka via ops/kafka/kafka.sh) that the test may stop,
kill and restart without disturbing the shared one. Slow to start (seconds): use sparingly."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from embedstream.tools.embedded import free_port

SCRIPT = Path(__file__).parents[2] / "ops" / "kafka" / "kafka.sh"


class PrivateBroker:
    def __init__(self) -> None:
        self.port = free_port()
        self.controller_port = free_port()
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
