"""Client CPU of one large embeddings response: the openai SDK's parsing vs embedstream's.

    python bench/bench_parse.py [--inputs 2048] [--dimensions 256] [--seconds 2]

A benchmark, not a test: it asserts nothing. Both sides run in this one process, alternating,
and the report gives ratios (machines are noisy; absolute times mean little).

1. **parse**: one response body of ``--inputs`` base64 vectors (what the SDK asks for on the
   wire) built by the simulator, turned into checked vectors (a) the way embedstream did
   before: the SDK's response models, its base64-to-list decoding and a finiteness test per
   float; (b) by ``embedder.parse_body``: orjson, bulk float32 decoding, one test per vector.
   Also (c) a base64 request, whose strings ``parse_body`` passes through.
2. **end to end**: the same calls over HTTP against a ``SimulatorServer`` running in a child
   process (so its CPU is not counted), (a) through ``AsyncOpenAI.embeddings.create`` plus the
   per-float test, (b) through ``OpenAIEmbedder.embed``; this process's CPU seconds per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import socket
import time
from collections.abc import Callable

import openai  # the baseline is the SDK itself; the package imports it only in embedder.py
import orjson
from embedsim import SimulatorConfig, SimulatorServer
from embedsim.model import EmbeddingRequest, build_response
from embedstream.engine.answers import parse_body
from embedstream.engine.backend import BatchCall
from embedstream.engine.embedder import OpenAIEmbedder
from openai._models import construct_type
from openai.lib._parsing._embeddings import parse_embedding_response
from openai.types import CreateEmbeddingResponse

MODEL = "text-embedding-3-small"


def sdk_vectors(body: bytes) -> list[list[float]]:
    """What the old embedder did with a body: SDK models, SDK decoding, a test per float."""
    # As LegacyAPIResponse.parse(): the stdlib json (as httpx's), construct_type, post_parser.
    response = construct_type(type_=CreateEmbeddingResponse, value=json.loads(body))
    assert isinstance(response, CreateEmbeddingResponse)
    response = parse_embedding_response(response, encoding_format=openai.omit)
    vectors = [entry.embedding for entry in response.data]
    for vector in vectors:
        if not all(math.isfinite(x) for x in vector):
            raise ValueError("NaN")
    return vectors


def cpu_per_call(fn: Callable[[], object], seconds: float) -> float:
    """Mean process CPU seconds per call of ``fn`` over about ``seconds`` of wall time."""
    calls = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < seconds:
        fn()
        calls += 1
    return (time.process_time() - cpu0) / calls


def bench_parse(inputs: int, dimensions: int, seconds: float) -> None:
    texts = tuple(f"text number {i} about streams and batches" for i in range(inputs))
    request = EmbeddingRequest(MODEL, texts, (8,) * inputs, "base64", dimensions)
    body = orjson.dumps(build_response(request, range(inputs)))
    as_float = BatchCall(MODEL, texts, "float", dimensions)
    as_base64 = BatchCall(MODEL, texts, "base64", dimensions)
    assert sdk_vectors(body) == parse_body(as_float, body, 0.0, {}).vectors  # same numbers
    rounds = 3
    sdk = new = passthrough = 0.0
    for _ in range(rounds):  # alternate so drifting machine load hits both sides alike
        sdk += cpu_per_call(lambda: sdk_vectors(body), seconds / rounds)
        new += cpu_per_call(lambda: parse_body(as_float, body, 0.0, {}), seconds / rounds)
        passthrough += cpu_per_call(lambda: parse_body(as_base64, body, 0.0, {}), seconds / rounds)
    rows = [
        ("SDK models + decode + per-float test", sdk),
        ("parse_body, float request", new),
        ("parse_body, base64 pass-through", passthrough),
    ]
    print(f"parse of a {inputs}x{dimensions} response ({len(body) / 1e6:.1f} MB body), per call:")
    for label, total in rows:
        print(f"  {label:<38} {total / rounds * 1e3:8.2f} ms   {total / sdk:.2f}x")


def _serve(port: int, ready: multiprocessing.synchronize.Event) -> None:
    async def main() -> None:
        async with SimulatorServer(SimulatorConfig(base_ms=0.0)) as sim:
            await sim.stop()
            await sim.start(port=port)
            ready.set()
            await asyncio.Event().wait()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def bench_http(inputs: int, dimensions: int, calls: int) -> None:
    port = _free_port()
    ready = multiprocessing.Event()
    child = multiprocessing.Process(target=_serve, args=(port, ready), daemon=True)
    child.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("simulator did not start")
        url = f"http://127.0.0.1:{port}/v1"
        texts = [f"text number {i} about streams and batches" for i in range(inputs)]
        sdk_client = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0, timeout=60)
        embedder = OpenAIEmbedder(base_url=url, api_key="k", timeout_s=60)
        call = BatchCall(MODEL, texts, "float", dimensions)

        async def sdk_call() -> None:
            response = await sdk_client.embeddings.create(
                model=MODEL, input=texts, dimensions=dimensions
            )
            for entry in response.data:
                if not all(math.isfinite(x) for x in entry.embedding):
                    raise ValueError("NaN")

        async def new_call() -> None:
            await embedder.embed(call)

        cpu = {"sdk": 0.0, "new": 0.0}
        await sdk_call()  # warm-up: connections, imports
        await new_call()
        for _ in range(calls):
            for name, fn in (("sdk", sdk_call), ("new", new_call)):
                started = time.process_time()
                await fn()
                cpu[name] += time.process_time() - started
        await sdk_client.close()
        await embedder.close()
    finally:
        child.kill()
    sdk, new = cpu["sdk"] / calls, cpu["new"] / calls
    print(f"end to end over HTTP, {calls} calls each, client CPU per call:")
    print(f"  AsyncOpenAI.embeddings.create + test: {sdk * 1e3:8.2f} ms   1.00x")
    print(f"  OpenAIEmbedder.embed:                 {new * 1e3:8.2f} ms   {new / sdk:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=2048)
    parser.add_argument("--dimensions", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=2.0, help="per side of the parse test")
    parser.add_argument("--calls", type=int, default=5, help="per side of the HTTP test")
    args = parser.parse_args()
    bench_parse(args.inputs, args.dimensions, args.seconds)
    asyncio.run(bench_http(args.inputs, args.dimensions, args.calls))


if __name__ == "__main__":
    main()
