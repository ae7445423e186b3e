"""The embedding cache: ingest a set of texts, then re-ingest it with 10% of them changed.

    python bench/bench_cache.py --bootstrap 127.0.0.1:39092 [--quick] [--provider-tpm N]
                                [--items N] [--json out.json]

A benchmark, not a test: it asserts no times. It runs through the Kafka processor (the path
bulk re-ingestion takes, where a cache hit saves a call slot and a fetch is looked up in one
Redis round trip), so it needs an Apache Kafka broker (`bash ops/kafka/kafka.sh start`; the
address defaults to EMBEDSTREAM_TEST_BOOTSTRAP) and Debian's `redis-server`; the simulator
runs in a process of its own. Both passes run in one process, one after the other, and the
report compares them (ratios). The scenario itself is
`bench.cache_scenario.run_cache_scenario`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sys
from collections.abc import Sequence

from bench.cache_scenario import PROVIDER_TPM, run_cache_scenario


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap", default=os.environ.get("EMBEDSTREAM_TEST_BOOTSTRAP"))
    parser.add_argument("--quick", action="store_true", help="10,000 texts instead of 100,000")
    parser.add_argument("--items", type=int, default=None, help="texts per pass")
    parser.add_argument("--changed", type=float, default=0.1, help="share changed in pass 2")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--provider-tpm",
        type=float,
        default=PROVIDER_TPM,
        help="the simulated provider's tokens per minute; 0: latency alone limits it",
    )
    parser.add_argument("--json", default=None, help="also write every figure to this file")
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("no broker: pass --bootstrap or set EMBEDSTREAM_TEST_BOOTSTRAP")
    items = args.items or (10_000 if args.quick else 100_000)
    scenario = asyncio.run(
        run_cache_scenario(
            args.bootstrap,
            items=items,
            changed_share=args.changed,
            seed=args.seed,
            provider_tpm=args.provider_tpm,
        )
    )
    budget = f"{args.provider_tpm:,.0f} tokens/min" if args.provider_tpm else "no token budget"
    print(f"# Cache benchmark: {items:,} texts, then the same with {args.changed:.0%} changed")
    print(f"\nprovider: simulator, 40 ms + 0.02 ms/token + 0.05 ms/input per call, 8 at once, "
          f"{budget}\n")  # fmt: skip
    print(scenario.render())
    print(f"\n{platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores, {sys.platform}")  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(dataclasses.asdict(scenario), out, indent=2)


if __name__ == "__main__":
    main()
