"""The pgvector store's write path: rows/s and client CPU per 1,000 rows, one line per method.

    python bench/bench_pgvector.py [--dsn URI] [--batches 20] [--batch-size 500] [--dims 256]

A benchmark, not a test: it asserts nothing. Each method writes the same documents (10 chunks
and a ``complete`` each) into a fresh table, ``--batches`` batches of ``--batch-size`` chunks,
one transaction per batch, then re-applies them (a replay: every row already there as it is,
which the store leaves untouched instead of rewriting it). Without
``--dsn`` it starts a throwaway PostgreSQL (pgserver) on a unix socket. CPU is this process's
(parsing is not included: the records are built beforehand); the server's CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from typing import Literal

from embedstream.stores.pgvector import PgStoreConfig, PgVectorStore
from embedstream.testing.postgres import start_postgres
from embedstream.wire import ChunkResult, DocumentComplete, OutputRecord

CHUNKS_PER_DOC = 10
METHODS: tuple[Literal["copy", "executemany"], ...] = ("copy", "executemany")


def batches(count: int, size: int, dims: int) -> list[list[OutputRecord]]:
    rng = random.Random(7)
    out: list[list[OutputRecord]] = []
    for b in range(count):
        batch: list[OutputRecord] = []
        for d in range(size // CHUNKS_PER_DOC):
            doc = f"doc-{b}-{d}"
            for seq in range(CHUNKS_PER_DOC):
                vector = [rng.uniform(-1, 1) for _ in range(dims)]
                batch.append(
                    ChunkResult(
                        doc,
                        "v1",
                        seq,
                        CHUNKS_PER_DOC,
                        (seq * 100, seq * 100 + 99),
                        vector,
                        "m",
                        dims,
                        80,
                        False,
                        {"n": d},
                        1,
                        1.0,
                    )
                )
            batch.append(DocumentComplete(doc, "v1", CHUNKS_PER_DOC, None))
        out.append(batch)
    return out


async def run(
    dsn: str,
    method: Literal["copy", "executemany"],
    data: Sequence[list[OutputRecord]],
    dims: int,
    index: Literal["none", "hnsw"],
) -> None:
    table = f"bench_{method}_{uuid.uuid4().hex[:8]}"
    config = PgStoreConfig(
        dsn=dsn, table=table, model="m", dimensions=dims, index=index, insert_method=method
    )
    async with PgVectorStore(config) as store:
        for label in ("insert", "replay"):
            rows = 0
            wall, cpu = time.perf_counter(), time.process_time()
            for batch in data:
                await store.apply(batch)
                rows += sum(isinstance(r, ChunkResult) for r in batch)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(
                f"{method:<12} {label:<6} index={index:<5} {rows} rows of {dims} dims in "
                f"batches of {len(data[0]) - len(data[0]) // (CHUNKS_PER_DOC + 1)}: "
                f"{rows / wall:>8,.0f} rows/s, {cpu / rows * 1000:.3f} CPU s per 1,000 rows"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--index", choices=("none", "hnsw"), default="none")
    args = parser.parse_args()
    data = batches(args.batches, args.batch_size, args.dims)
    server = None if args.dsn else start_postgres()
    dsn = args.dsn or (server.dsn if server else "")
    try:
        for method in METHODS:
            asyncio.run(run(dsn, method, data, args.dims, args.index))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
