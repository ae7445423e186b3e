"""The lean request path against the SDK path, on the simulator: every fault ends the same way
(error class, reason, message, retry-after), in every flavor, and the request that reaches the
provider carries the same URL, key and fields."""

from __future__ import annotations

import re
from typing import Any

import pytest
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.engine.backend import BatchCall
from embedstream.engine.embedder import AzureTarget, OpenAIEmbedder
from embedstream.engine.lean_http import env_proxy
from embedstream.errors import EmbedStreamError

KEY = "sk-secret-key"
TEXTS = [f"text {i}" for i in range(6)]

FAULTS: dict[str, dict[str, Any]] = {
    "wrong key": {"auth_key": "other"},
    "500": {"error_rate": 1.0},
    "429 with retry-after": {"rate_limit_for_s": 60},
    "400 on an input": {"reject_texts_containing": "3"},
    "timeout": {"hang_rate": 1.0, "hang_s": 60},
    "unknown model": {"served_model": "served"},
    "too many inputs": {"limits": {"max_inputs": 2}},
}
FLAVORS = ("openai", "vllm", "tei", "ollama", "azure")


async def ends(
    sim: SimulatorServer, flavor: str, *, sdk: bool, call: BatchCall, timeout_s: float = 10.0
) -> object:
    """The outcome's vectors, or the error's class, reason, message and whether it carries a
    retry-after within the simulator's 60 s (the two calls are a moment apart). The timeout is
    short only where the fault is a hang: on a loaded machine the SDK's first call in a worker
    took over half a second, and an answer was taken for a timeout."""
    azure = AzureTarget(sim.root_url, None, "2024-10-21") if flavor == "azure" else None
    embedder = OpenAIEmbedder(
        base_url=sim.url, api_key=KEY, timeout_s=timeout_s, azure=azure, sdk=sdk
    )
    try:
        outcome = await embedder.embed(call)
        return outcome.vectors, outcome.dimensions, outcome.total_tokens
    except EmbedStreamError as exc:
        assert KEY not in str(exc)
        message = re.sub(r"again in [0-9.]+s", "again in Ns", str(exc))
        wait = None if exc.retry_after is None else 0 < exc.retry_after <= 60
        return type(exc).__name__, exc.reason, message, wait
    finally:
        await embedder.close()


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_both_paths_classify_each_fault_alike(fault: str, flavor: str) -> None:
    settings: dict[str, Any] = {"base_ms": 0, "flavor": flavor, "auth_key": KEY, **FAULTS[fault]}
    config = SimulatorConfig(**settings)
    call = BatchCall("m", TEXTS, "float", None)
    timeout_s = 0.5 if fault == "timeout" else 10.0
    async with SimulatorServer(config) as sim:
        lean = await ends(sim, flavor, sdk=False, call=call, timeout_s=timeout_s)
        sdk = await ends(sim, flavor, sdk=True, call=call, timeout_s=timeout_s)
    assert lean == sdk
    if fault == "429 with retry-after":
        assert isinstance(lean, tuple) and lean[1] == "rate_limited" and lean[3] is True


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_both_paths_send_the_same_request(flavor: str) -> None:
    config = SimulatorConfig(base_ms=0, flavor=flavor, auth_key=KEY, record_calls=True)
    call = BatchCall("m", TEXTS[:2], "base64", 64, user="u-1")
    async with SimulatorServer(config) as sim:
        lean = await ends(sim, flavor, sdk=False, call=call)
        sdk = await ends(sim, flavor, sdk=True, call=call)
        first, second = sim.calls
    assert lean == sdk and isinstance(lean, tuple) and isinstance(lean[0], list)
    assert (first.path, first.inputs, first.fields) == (second.path, second.inputs, second.fields)
    for name in ("authorization", "api-key", "content-type"):
        assert first.headers.get(name) == second.headers.get(name), name


async def test_an_unreachable_provider_is_a_connection_error_on_the_lean_path() -> None:
    embedder = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", api_key=KEY, timeout_s=2)
    try:
        with pytest.raises(EmbedStreamError) as info:
            await embedder.embed(BatchCall("m", ["x"], "float", None))
    finally:
        await embedder.close()
    assert info.value.reason == "connection" and info.value.retriable


def test_proxies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert env_proxy("http://api.example/v1/embeddings") == "http://proxy:3128"
    assert env_proxy("http://internal.example/v1/embeddings") is None
    assert env_proxy("https://api.example/v1/embeddings") is None


async def test_credentials_in_the_base_url_still_reach_the_provider() -> None:
    """A gateway's user:password@ in base_url: aiohttp refuses it beside an Authorization
    header, so such a URL takes the SDK's path (a canary test on the secured broker found
    every call of the lean path failing, and its request dead-lettered)."""
    async with SimulatorServer(SimulatorConfig()) as sim:
        url = sim.url.replace("http://", "http://gateway:canary@")
        embedder = OpenAIEmbedder(base_url=url, api_key="k", timeout_s=10)
        try:
            outcome = await embedder.embed(BatchCall("m", ["hello"], "float", None))
        finally:
            await embedder.close()
    assert len(outcome.vectors) == 1 and sim.stats.inputs == 1
