"""kafka-floor's two arms counted in instructions (callgrind), not CPU seconds: a figure that
another process on the machine does not move.

    python bench/bench_kafka_instructions.py --bootstrap 127.0.0.1:39092
    python bench/bench_kafka_instructions.py --bootstrap ... --baseline ../main --items 4000

Each arm runs in a fresh process under ``valgrind --tool=callgrind`` with instrumentation off
until the drain starts and off again once it ends (``callgrind_control``), so imports, the
publishing and the processor's start are not counted:

- **floor**: kafka-floor's bare aiokafka loop (decode, one result-sized send per record,
  commit per poll) over ``--items`` requests;
- **embedstream**: one processor of this checkout (and of ``--baseline``) draining the same
  number of requests from Apache Kafka against `embedstream simulate` at the bench's
  reference model over HTTP (bench_kafka_cpu.py ``--simulator``: kafka-floor's arm).

Instructions are not time: a byte copied by ``rep movsb`` counts as one, and the simulator
and the broker run uninstrumented in processes of their own. On this 2-core machine the
ratio of the two arms tracked kafka-floor's CPU ratio within a few percent (2.51 against
2.4-2.6 on the branch point of issue 41's CPU work, 1.33 against 1.37). A benchmark, not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from embedstream.kafka.client.admin import TopicSpec, load_topic_specs
from embedstream.tools.bench import kafka_flood
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.workload import make_texts

from bench import bench_kafka_cpu as cpu  # the drains, the settings, the simulator

DIMENSIONS = 256


class Counting(cpu.Sampler):
    """Instrumentation of this process (running under callgrind) on from :meth:`start` to
    :meth:`stop`, where bench_kafka_cpu's Sampler would sample it."""

    def __init__(self) -> None:
        super().__init__(None)

    def start(self) -> None:
        self._control("on")

    def stop(self) -> None:
        self._control("off")

    def _control(self, state: str) -> None:
        command = ["callgrind_control", "--instr=" + state, str(os.getpid())]
        subprocess.run(command, check=True, capture_output=True, timeout=120)


async def _floor(bootstrap: str, items: int, counting: Counting) -> None:
    base = cpu.bench_settings(encoding_format="base64", cache="off")
    settings = KafkaBroker(bootstrap, embedded=False).settings(base, unique_prefix("floor"))
    out = TopicSpec("floor", settings.topic_prefix + "floor.results", 4, 1, {})
    specs = [*load_topic_specs(settings.topic_prefix), out]
    async with scenario_topics(settings, specs) as names:
        await publish(settings, names.requests_low, make_texts(items), "floor-")
        counting.start()
        await kafka_flood._bare_loop(settings, names.requests_low, out.name, items, DIMENSIONS)
        counting.stop()


def child(args: argparse.Namespace) -> None:
    """One arm in this process (under callgrind)."""
    asyncio.run(cpu.drain_in_memory(1_000, cpu.Sampler(None), "base64", "off"))  # warm-up
    cpu.POLL_S = 0.2  # the drain's end found later, and the polls not counted by the hundred
    if args.arm == "floor":
        asyncio.run(_floor(args.bootstrap, args.items, Counting()))
    else:
        drain = cpu.drain_on_kafka(
            args.bootstrap, args.items, Counting(), "base64", "off", simulator=True
        )
        asyncio.run(drain)


def measure(args: argparse.Namespace, source: Path, arm: str) -> float:
    """Instructions per item of one arm, with ``source``'s embedstream."""
    with tempfile.TemporaryDirectory() as out:
        counts = Path(out) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={counts}", sys.executable, __file__, "--child",
                   "--arm", arm, "--items", str(args.items),
                   "--bootstrap", args.bootstrap]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": f"{source / 'stream'}:{source}"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"a measurement failed:\n{done.stderr[-3000:]}")
        totals = [line for line in counts.read_text().splitlines() if line.startswith("totals:")]
        items: int = args.items
        return int(totals[-1].split()[1]) / items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True, help="Apache Kafka")
    parser.add_argument("--items", type=int, default=4_000)
    parser.add_argument("--baseline", type=Path, help="a checkout measured beside this one")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arm", choices=("floor", "embedstream"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    here = Path(__file__).resolve().parent.parent
    print(f"{args.items:,} requests, Apache Kafka at {args.bootstrap}, base64 results, cache off")
    floor = measure(args, here, "floor")
    print("\n| arm | instructions per item | against the floor |\n|---|---:|---:|")
    print(f"| bare aiokafka loop (kafka-floor's floor) | {floor:,.0f} | 1.00x |")
    arms = [("embedstream, this checkout", here)]
    if args.baseline is not None:
        arms.insert(0, (f"embedstream, {args.baseline.name}", args.baseline.resolve()))
    for label, source in arms:
        ours = measure(args, source, "embedstream")
        print(f"| {label} | {ours:,.0f} | {ours / floor:.2f}x |")


if __name__ == "__main__":
    main()
