"""Online callers in a process of their own: `python -m embedstream.tools.bench.remote_callers`.

In the bench's process the callers' own client work ran on the processor's event loop, so
every answer also waited for the drain's turns on the *caller's* side, in both arms (through
the lane and straight to the provider): a RAG service calls from a process of its own. The
child plans the same Poisson requests as before (the same seeds), prints ``ready``, reads the
start (a `time.monotonic()` value: one clock for every process on the machine) from stdin,
sends until a ``stop`` line, waits a bounded time for the answers in flight, and prints one
JSON line: the latencies and counts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
import orjson

from embedstream.tools.bench.child import READY, START_TIMEOUT_S, BenchChild, stdin_lines
from embedstream.tools.bench.timeline import traceparent_for
from embedstream.tools.bench.workload import make_texts, poisson_arrivals

ARRAY_EVERY = 10  # one request in ten carries an array
ARRAY_INPUTS = 16
ANSWER_WAIT_S = 10.0  # after the stop, for the requests already sent


@dataclass(frozen=True, slots=True)
class CallerFigures:
    """What the callers measured: how many were sent and how many got no 200, and (number,
    scheduled, answered) of each answered request, `time.monotonic()` values (one clock for
    every process: a timeline across them)."""

    sent: int
    failed: int
    answered: list[tuple[int, float, float]]
    # Answers other than 200 by HTTP status ("0": no answer: a timeout or a broken connection),
    # each with how long it took: a 429 given at once is not a 504 after the deadline.
    refused: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    @property
    def latencies_s(self) -> list[float]:
        """Each answered request's latency from its scheduled time."""
        return [answered - due for _, due, answered in self.answered]


class OnlineCallers:
    """Requests at Poisson times from a start until stopped, each on its own task (an open
    loop: a slow answer delays nobody else). Texts and times are made before the start. Each
    request carries its number in a ``traceparent`` header (``timeline.traceparent_for``)."""

    def __init__(self, url: str, model: str, rate: float, seconds: float) -> None:
        self._url = url
        arrivals = poisson_arrivals(rate, seconds, seed=11) if rate > 0 else []
        texts = make_texts(len(arrivals) * ARRAY_INPUTS, seed=11)
        rng = random.Random(11)
        self._plan: list[tuple[float, bytes]] = []
        for i, offset in enumerate(arrivals):
            many = rng.randrange(ARRAY_EVERY) == 0
            chosen = texts[i * ARRAY_INPUTS : (i + 1) * ARRAY_INPUTS] if many else texts[i]
            body = {"model": model, "input": chosen, "encoding_format": "base64"}
            self._plan.append((offset, orjson.dumps(body)))
        self.latencies_s: list[float] = []
        self.answered: list[tuple[int, float, float]] = []
        self.failed = 0
        self.refused: dict[str, list[float]] = {}
        self.sent = 0
        self._inflight: set[asyncio.Task[None]] = set()

    async def run(self, session: aiohttp.ClientSession, start: float) -> None:
        loop = asyncio.get_running_loop()
        for number, (offset, body) in enumerate(self._plan):
            due = start + offset
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            task = asyncio.create_task(self._one(session, number, body, due))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            self.sent += 1

    async def settle(self, within_s: float) -> None:
        """Wait for the requests already sent (a bounded time); the rest count as failed."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=within_s)
        for task in list(self._inflight):
            task.cancel()
        if self._inflight:
            await asyncio.wait(set(self._inflight))

    async def _one(
        self, session: aiohttp.ClientSession, number: int, body: bytes, due: float
    ) -> None:
        loop = asyncio.get_running_loop()
        status = 0
        try:
            headers = {"Content-Type": "application/json", "Authorization": "Bearer bench",
                       "traceparent": traceparent_for(number)}  # fmt: skip
            async with session.post(self._url, data=body, headers=headers) as answer:
                await answer.read()
                status = answer.status
        except (aiohttp.ClientError, asyncio.CancelledError):
            status = 0
        answered = loop.time()
        if status == 200:
            self.latencies_s.append(answered - due)
            self.answered.append((number, due, answered))
        else:
            self.failed += 1
            self.refused.setdefault(str(status), []).append(answered - due)


async def serve_once(url: str, model: str, rate: float, seconds: float) -> dict[str, object]:
    """The child's whole life: plan, ready, start, call until stopped, the figures."""
    callers = OnlineCallers(url, model, rate, seconds)
    reader = await stdin_lines()
    async with aiohttp.ClientSession() as session:
        print(READY, flush=True)
        start = float((await reader.readline()).decode() or time.monotonic())
        calling = asyncio.create_task(callers.run(session, start))
        await reader.readline()  # the stop line, or EOF: the parent is gone
        calling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await calling
        await callers.settle(ANSWER_WAIT_S)
    return {
        "sent": callers.sent,
        "failed": callers.failed,
        "answered": callers.answered,
        "refused": callers.refused,
    }


class CallersChild(BenchChild):
    """The parent's side of the callers' process."""

    def __init__(self, url: str, model: str, rate: float, seconds: float) -> None:
        args = ["--url", url, "--model", model, "--rate", str(rate), "--seconds", str(seconds)]
        super().__init__(
            "embedstream.tools.bench.remote_callers", args, "the online callers'",
            figures_timeout_s=ANSWER_WAIT_S + START_TIMEOUT_S,
        )  # fmt: skip

    async def finish(self) -> CallerFigures:
        """Stop sending; what the callers measured."""
        figures = await self.figures()
        answered = [(int(n), float(due), float(at)) for n, due, at in figures["answered"]]
        refused = {
            str(status): [float(s) for s in took]
            for status, took in dict(figures.get("refused") or {}).items()
        }
        return CallerFigures(int(figures["sent"]), int(figures["failed"]), answered, refused)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="remote_callers", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    figures = asyncio.run(serve_once(args.url, args.model, args.rate, args.seconds))
    sys.stdout.write(orjson.dumps(figures).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
