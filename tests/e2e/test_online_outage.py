"""The online lane serves again within about 2 s of the provider's return, in `serve` and in
`run`'s online lane (Kafka lanes on the real broker), under a trickle of requests through the
official `openai` SDK: the provider is a real `embedstream simulate`, killed and started again
on the same port.

Found from outside (issue 42): after a 3 s outage `serve` still answered every request
`503 provider_unavailable` 60 s later and /readyz said "provider unusable"; nothing ever asked
the provider again. `run`'s processor was stuck the same way (its lane's failures count in
its governor), so its Kafka lanes stopped fetching for good.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import openai
import pytest
from embedsim.model import expected_vector
from embedstream.kafka.client.admin import topic_names
from embedstream.testing import eventually

from tests.e2e.lanes import CALLER_KEY, Lane, Simulator, online_lane
from tests.integration.helpers import publish, request, wait_for_ids

pytestmark = [pytest.mark.integration]

TRICKLE_EVERY_S = 0.2
OUTAGE_S = 3.0
SERVING_WITHIN_S = 2.0  # of the provider's return


async def trickle(client: openai.AsyncOpenAI, until: asyncio.Event) -> list[tuple[float, str]]:
    """One request every TRICKLE_EVERY_S until ``until``: (when sent, "200" or the status)."""
    answers: list[asyncio.Task[tuple[float, str]]] = []

    async def one(n: int) -> tuple[float, str]:
        sent = time.monotonic()
        try:
            answer = await client.embeddings.create(model="m", input=f"trickle {n}")
        except openai.APIStatusError as exc:
            return sent, str(exc.status_code)
        except openai.APIConnectionError:
            return sent, "connection"
        assert answer.data[0].embedding is not None
        return sent, "200"

    n = 0
    while not until.is_set():
        answers.append(asyncio.create_task(one(n)))
        n += 1
        await asyncio.sleep(TRICKLE_EVERY_S)
    return list(await asyncio.gather(*answers))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_the_online_lane_serves_again_soon_after_the_provider_returns(
    kind: str, bootstrap: str, tmp_path: Path
) -> None:
    provider = Simulator(tmp_path)
    provider.start()
    try:
        with online_lane(kind, provider.url, tmp_path, bootstrap=bootstrap) as lane:
            await _outage_under_a_trickle(provider, lane, bootstrap)
    finally:
        provider.kill()


async def _outage_under_a_trickle(provider: Simulator, lane: Lane, bootstrap: str) -> None:
    client = openai.AsyncOpenAI(
        base_url=lane.base_url, api_key=CALLER_KEY, max_retries=0, timeout=15
    )
    stop = asyncio.Event()
    answers = asyncio.create_task(trickle(client, stop))
    await asyncio.sleep(2.0)
    provider.kill()
    killed_at = time.monotonic()
    await asyncio.sleep(OUTAGE_S)
    await asyncio.to_thread(provider.start)  # the same port; answers once this returns
    back_at = time.monotonic()
    await asyncio.sleep(SERVING_WITHIN_S + 4.0)
    stop.set()
    results = await answers
    await client.close()
    during = [status for sent, status in results if killed_at + 1.5 < sent < back_at]
    after = [status for sent, status in results if sent > back_at + SERVING_WITHIN_S]
    first_200 = min(sent for sent, status in results if sent > back_at and status == "200")
    described = f"{lane.kind}: {[(round(t - back_at, 1), s) for t, s in results]}"
    assert during and "200" not in during, described  # the outage was seen
    assert after and set(after) == {"200"}, described
    assert first_200 - back_at <= SERVING_WITHIN_S, described
    assert lane.readyz() == 200
    assert "Future exception was never retrieved" not in lane.log_text()
    if lane.kind == "run":
        # The processor's Kafka lanes serve again too (they stopped fetching for good).
        assert lane.prefix is not None
        await eventually(lambda: lane.processor_readyz() == 200, timeout_s=10, poll_s=0.2)
        names = topic_names(lane.prefix)
        await publish(bootstrap, names.requests_high, [request("k1", "kafka")])
        seen = await wait_for_ids(bootstrap, names.results, {"k1"}, timeout_s=30)
        vector = seen["k1"][0]["embedding"]
        assert vector == pytest.approx(expected_vector("text-embedding-3-small", "kafka", 256))
