"""A failed call's retry records: one `send()` each against gathered record batches.

    python bench/bench_retry_writes.py --bootstrap 127.0.0.1:39092
    python bench/bench_retry_writes.py --bootstrap ... --items 2048 --rounds 5

When a call of N inputs fails (a timeout, a 5xx while the provider serves others), each of its
N items writes its retry record from a coroutine of its own, all in one turn of the loop. This
writes N retry-shaped records (the request's bytes, the retry headers) to a topic through the
processor's own producer settings and `DirectWriter`, side by side in one run:

- `one send each`: N concurrent `DirectWriter.write` calls (how retries were written);
- `gathered`: the same N calls through `GatheredWrites` (how `ResultWriter` writes them now).

It reports the wall time and this process's CPU time per record, arms interleaved round by
round, and the ratio of medians. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.kafka.client.clients import make_producer
from embedstream.kafka.outputs.gathered_writes import GatheredWrites
from embedstream.kafka.outputs.result_writer import DirectWriter, Output
from embedstream.kafka.outputs.work import Origin
from embedstream.settings import load_settings
from embedstream.wire import RetryState

Arm = Callable[[DirectWriter, Sequence[Output]], Awaitable[None]]


async def one_send_each(writer: DirectWriter, outputs: Sequence[Output]) -> None:
    await asyncio.gather(*(writer.write(o) for o in outputs))


async def gathered(writer: DirectWriter, outputs: Sequence[Output]) -> None:
    gather: GatheredWrites[Output] = GatheredWrites(writer.write_many)
    await asyncio.gather(*(gather.write(o) for o in outputs))


ARMS: dict[str, Arm] = {"one send each": one_send_each, "gathered": gathered}


def retry_outputs(topic: str, items: int, round_no: int) -> list[Output]:
    outputs = []
    for n in range(items):
        request_id = f"r{round_no}-{n}"
        value = b'{"id": "%s", "text": "%s"}' % (request_id.encode(), b"word " * 30)
        state = RetryState(
            attempts=1,
            not_before_ms=int(time.time() * 1000) + 500,
            first_error="timeout: the provider did not answer in 30s",
            first_failure_ms=int(time.time() * 1000),
            high_priority=False,
            enqueued_at_ms=int(time.time() * 1000),
        )
        origin = Origin("bench.requests.low", n % 4, n)
        outputs.append(Output(origin, topic, request_id.encode(), value, state.headers()))
    return outputs


async def main(bootstrap: str, items: int, rounds: int) -> None:
    topic = f"bench.retry-writes.{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])
        await measure(bootstrap, topic, items, rounds)
    finally:
        await admin.delete_topics([topic])  # a broker shared with tests keeps no bench topics
        await admin.close()


async def measure(bootstrap: str, topic: str, items: int, rounds: int) -> None:
    settings = load_settings(env={}, overrides={"bootstrap_servers": bootstrap})
    producer = make_producer(settings)
    await producer.start()
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ARMS}
    try:
        writer = DirectWriter(producer, SYSTEM_CLOCK)
        await one_send_each(writer, retry_outputs(topic, 64, -1))  # warm: metadata, connection
        for round_no in range(rounds):
            for name, arm in ARMS.items():
                outputs = retry_outputs(topic, items, round_no)
                wall, cpu = time.perf_counter(), time.process_time()
                await arm(writer, outputs)
                figures[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    finally:
        await producer.stop()
    print(f"{items} retry records, {rounds} rounds, arms interleaved (medians)")
    print(f"{'arm':<16}{'wall ms':>10}{'CPU µs/record':>16}")
    medians = {}
    for name, runs in figures.items():
        wall_ms = statistics.median(w for w, _ in runs) * 1000
        cpu_us = statistics.median(c for _, c in runs) * 1e6 / items
        medians[name] = (wall_ms, cpu_us)
        print(f"{name:<16}{wall_ms:>10.1f}{cpu_us:>16.1f}")
    (old_wall, old_cpu), (new_wall, new_cpu) = medians["one send each"], medians["gathered"]
    ratios = f"wall {new_wall / old_wall:.2f}x, CPU {new_cpu / old_cpu:.2f}x"
    print(f"gathered / one send each: {ratios}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--items", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(main(options.bootstrap, options.items, options.rounds))
