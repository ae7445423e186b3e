"""The online lane as a user runs it, for the e2e tests: a real `embedstream simulate` process
as the provider, and in front of it `embedstream serve` or `embedstream run` with http_port
(its online lane beside Kafka lanes on the real broker), each a subprocess on free ports.

Synchronous (subprocess.Popen), so module-scoped fixtures can share one set of processes
between the tests of a client; every process is killed on the way out.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedstream.kafka.client.admin import (
    create_topics,
    delete_topics,
    list_topics,
    load_topic_specs,
)
from embedstream.tools.embedded import free_port

STREAM = Path(__file__).resolve().parents[2] / "stream"
PROVIDER_KEY = "sk-provider-k"  # the simulator's --auth-key, the lane's api_key
CALLER_KEY = "sk-test-123"  # a caller's key of http_api_keys (test:sk-test-123)


def hermetic_env(**values: str) -> dict[str, str]:
    """This interpreter's environment without EMBEDSTREAM_*/OPENAI_* settings, plus ``values``,
    with this tree's `stream/` first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDSTREAM_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STREAM), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(values)
    return env


def http_status(url: str, timeout_s: float = 2.0) -> int:
    """The status of a GET, 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def wait_until_answering(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while http_status(url) == 0:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before answering")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing answered {url} within {timeout_s}s")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Simulator:
    """`embedstream simulate` on a fixed port, to kill and start again on the same one."""

    def __init__(self, log_dir: Path, *args: str) -> None:
        self.port = free_port()
        self.args = args
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        self.starts += 1
        log = (self.log_dir / f"simulate-{self.port}-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "embedstream.cli", "simulate", "--port", str(self.port),
             "--auth-key", PROVIDER_KEY, *self.args],
            env=hermetic_env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until_answering(f"http://127.0.0.1:{self.port}/healthz", self.proc)

    def kill(self) -> None:
        if self.proc is not None:
            stop(self.proc)

    def calls(self) -> int:
        """The calls the simulator has answered so far, whatever their outcome."""
        calls = self.stats()["calls"]
        assert isinstance(calls, int)
        return calls

    def errors(self, status: int) -> int:
        """The calls the simulator has answered with ``status`` so far."""
        errors = self.stats()["errors"]
        assert isinstance(errors, dict)
        return int(errors.get(str(status), 0))

    def stats(self) -> dict[str, object]:
        import orjson

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as answer:
            stats: dict[str, object] = orjson.loads(answer.read())
        return stats


@dataclass
class Lane:
    """A running online lane: `serve`, or `run`'s with a processor beside it."""

    kind: str  # "serve" or "run"
    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log: Path
    prefix: str | None = None  # run: its topics' prefix

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def readyz(self) -> int:
        return http_status(f"http://127.0.0.1:{self.port}/readyz")

    def processor_readyz(self) -> int:
        """`run`'s own /readyz on its ops port (the Kafka lanes); serve's is the gateway's."""
        return http_status(f"http://127.0.0.1:{self.metrics_port}/readyz")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def online_lane(
    kind: str, provider_url: str, log_dir: Path, *args: str, bootstrap: str | None = None
) -> Iterator[Lane]:
    """`embedstream serve`, or `embedstream run` (Kafka topics of a fresh prefix on
    ``bootstrap``) with http_port, in front of ``provider_url``; killed on the way out."""
    port, metrics_port = free_port(), free_port()
    common = ["--base-url", provider_url, "--http-port", str(port),
              "--metrics-port", str(metrics_port), *args]  # fmt: skip
    prefix = None
    if kind == "serve":
        command = ["serve", *common]
    else:
        assert bootstrap is not None, "run needs the broker"
        prefix = f"test.{uuid.uuid4().hex[:12]}."
        _blocking(create_topics(bootstrap, load_topic_specs(prefix)))
        command = ["run", "--bootstrap-servers", bootstrap, "--topic-prefix", prefix,
                   "--group-id", prefix + "group", "--max-wait-ms", "20", *common]  # fmt: skip
    log = log_dir / f"{kind}-{port}.log"
    env = hermetic_env(
        EMBEDSTREAM_API_KEY=PROVIDER_KEY, EMBEDSTREAM_HTTP_API_KEYS=f"test:{CALLER_KEY}"
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "embedstream.cli", *command],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_until_answering(f"http://127.0.0.1:{port}/healthz", proc)
        yield Lane(kind, proc, port, metrics_port, log, prefix)
    finally:
        stop(proc, signal.SIGTERM)
        if prefix is not None and bootstrap is not None:
            _blocking(_delete_topics(bootstrap, prefix))


def _blocking(work: Coroutine[Any, Any, object]) -> None:
    """Run ``work`` to its end on a loop of its own (the caller may be on one: an async test)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, work).result()


async def _delete_topics(bootstrap: str, prefix: str) -> None:
    await delete_topics(bootstrap, await list_topics(bootstrap, prefix))
