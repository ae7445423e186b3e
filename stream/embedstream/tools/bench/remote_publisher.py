"""The flood's high events published from a process of their own:
`python -m embedstream.tools.bench.remote_publisher`.

In the bench's process the publisher's turns waited for the drain's, on the processor's event
loop: the high requests' P99 from their scheduled time to their publication was 144-155 ms,
the bench's own (producers of high events are other processes). The child plans the same
Poisson events as the parent (one seed: :func:`high_plan`), connects its producer, prints
``ready``, reads the start (a `time.monotonic()` value, one clock for every process on the
machine) from stdin, publishes on schedule until a ``stop`` line, and prints one JSON line:
each sent event's id and publication moment.

Connection settings (bootstrap servers, security) reach the child as EMBEDSTREAM_* variables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence

import orjson

from embedstream.errors import env_var
from embedstream.kafka.client.clients import make_producer
from embedstream.kafka.client.protocols import Producer
from embedstream.settings import FIELDS, Settings, load_settings
from embedstream.tools.bench.child import READY, BenchChild, stdin_lines
from embedstream.tools.bench.workload import make_texts, poisson_arrivals

STOP_TIMEOUT_S = 30.0
CONNECTION_PREFIXES = ("bootstrap_servers", "security_", "sasl_", "ssl_")
START_DELAY_S = 0.05  # the first event's offset from the start

Plan = list[tuple[float, str, str]]  # (offset s, request id, text)


def high_plan(rate: float, seconds: float) -> Plan:
    """The high events of a flood: Poisson offsets, ids and texts, the same in every process."""
    arrivals = poisson_arrivals(rate, seconds, seed=7) if rate > 0 else []
    texts = make_texts(len(arrivals), seed=7)
    return [
        (START_DELAY_S + offset, f"high-{i}", f"high {text}")
        for i, (offset, text) in enumerate(zip(arrivals, texts, strict=True))
    ]


def connection_environment(settings: Settings) -> dict[str, str]:
    """EMBEDSTREAM_* variables carrying the settings a producer connects with."""
    env: dict[str, str] = {}
    for name in FIELDS:
        value = getattr(settings, name)
        if name.startswith(CONNECTION_PREFIXES) and value is not None:
            env[env_var(name)] = str(value)
    return env


async def publish_on_schedule(
    producer: Producer, topic: str, plan: Plan, start: float, stopped: asyncio.Event
) -> dict[str, float]:
    """Send each event at ``start`` + its offset (every event due at a wake-up in that turn)
    until ``stopped``; the moment each was handed to the producer, by id."""
    published: dict[str, float] = {}
    delivered: list[asyncio.Future[object]] = []
    loop = asyncio.get_running_loop()
    i = 0
    while i < len(plan) and not stopped.is_set():
        now = loop.time()
        if start + plan[i][0] > now:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), start + plan[i][0] - now)
            continue
        while i < len(plan) and start + plan[i][0] <= now:
            _, request_id, text = plan[i]
            value = orjson.dumps({"id": request_id, "text": text})
            delivered.append(await producer.send(topic, value, key=request_id.encode()))
            published[request_id] = loop.time()
            i += 1
    await asyncio.gather(*delivered)  # every event acknowledged before the figures go back
    return published


async def _publish(topic: str, rate: float, seconds: float) -> dict[str, float]:
    settings = load_settings(env=os.environ)
    plan = high_plan(rate, seconds)
    loop = asyncio.get_running_loop()
    reader = await stdin_lines()
    producer = make_producer(settings, linger_ms=1)
    await producer.start()  # connected before the start: the first events wait for nothing
    try:
        print(READY, flush=True)
        start = float((await reader.readline()).decode() or loop.time())
        stopped = asyncio.Event()

        async def watch_stop() -> None:
            await reader.readline()  # the stop line, or EOF: the parent is gone
            stopped.set()

        watching = asyncio.create_task(watch_stop())
        try:
            return await publish_on_schedule(producer, topic, plan, start, stopped)
        finally:
            watching.cancel()
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()


class PublisherChild(BenchChild):
    """The parent's side of the publisher's process."""

    def __init__(self, settings: Settings, topic: str, rate: float, seconds: float) -> None:
        args = ["--topic", topic, "--rate", str(rate), "--seconds", str(seconds)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
        super().__init__(
            "embedstream.tools.bench.remote_publisher", args, "the high publisher's",
            env=env | connection_environment(settings), figures_timeout_s=STOP_TIMEOUT_S,
        )  # fmt: skip
        self.plan = high_plan(rate, seconds)

    async def finish(self) -> Mapping[str, float]:
        """Stop publishing; each sent event's publication moment, by id."""
        published = await self.figures()
        return {str(k): float(v) for k, v in published.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="remote_publisher", description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    published = asyncio.run(_publish(args.topic, args.rate, args.seconds))
    sys.stdout.write(orjson.dumps(published).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
