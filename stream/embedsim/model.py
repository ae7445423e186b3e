"""Pure core of the simulated embeddings provider: latency, faults, rate limiting, stats.

Everything here is deterministic and side-effect free: no asyncio, no HTTP, no real clock.
Time comes in as a ``now`` argument and randomness from an injected ``random.Random``, so the
web shell in ``server.py`` stays thin and the rules can be unit-tested directly. The other
pure parts live beside it: ``vectors`` (vectors, token counts), ``flavors`` (what each imitated
provider does differently), ``config`` (the knobs), ``errors`` and ``protocol`` (requests and
answers); their names are re-exported here for callers that import them from this module.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from embedsim.config import SimulatorConfig as SimulatorConfig
from embedsim.errors import ApiError as ApiError
from embedsim.errors import authenticate as authenticate
from embedsim.errors import check_auth as check_auth
from embedsim.errors import invalid_request as invalid_request
from embedsim.errors import rate_limited as rate_limited
from embedsim.errors import server_error as server_error
from embedsim.flavors import Limits as Limits
from embedsim.protocol import MODELS as MODELS
from embedsim.protocol import EmbeddingRequest
from embedsim.protocol import EncodingFormat as EncodingFormat
from embedsim.protocol import build_response as build_response
from embedsim.protocol import check_rejected_texts as check_rejected_texts
from embedsim.protocol import find_model as find_model
from embedsim.protocol import flaky_failure as flaky_failure
from embedsim.protocol import model_entry as model_entry
from embedsim.protocol import model_list as model_list
from embedsim.protocol import parse_request as parse_request
from embedsim.protocol import validate_request as validate_request
from embedsim.vectors import count_tokens as count_tokens
from embedsim.vectors import decode_base64 as decode_base64
from embedsim.vectors import encode_base64 as encode_base64
from embedsim.vectors import expected_vector as expected_vector

__all__ = ["EmbeddingRequest"]


@dataclass(frozen=True)
class CallRecord:
    """One embeddings call as the simulator saw it, for tests that check timing, URLs,
    headers and request fields."""

    received_at: float  # the simulator's clock when the request arrived
    inputs: tuple[str, ...]
    status: int
    retry_after_s: float | None = None
    path: str = ""  # with the query string
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    fields: Mapping[str, object] = field(default_factory=dict)  # the body but its input


def latency_s(config: SimulatorConfig, request: EmbeddingRequest) -> float:
    ms = (
        config.base_ms
        + config.per_token_ms * request.total_tokens
        + config.per_input_ms * len(request.inputs)
    )
    return ms / 1000.0


# --------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class FaultDecision:
    fail: bool  # answer 500
    hang: bool  # wait hang_s first
    order: tuple[int, ...]  # order of `data` items


def decide_faults(config: SimulatorConfig, n_inputs: int, rng: random.Random) -> FaultDecision:
    """Roll the dice for one call. A rate of 0 draws nothing, so enabling one fault
    does not perturb the sequence of another."""
    fail = _roll(rng, config.error_rate)
    hang = not fail and _roll(rng, config.hang_rate)
    order = list(range(n_inputs))
    if n_inputs > 1 and _roll(rng, config.shuffle_rate):
        rng.shuffle(order)
        if order == sorted(order):  # an identity "shuffle" would be invisible to tests
            order = order[1:] + order[:1]
    return FaultDecision(fail=fail, hang=hang, order=tuple(order))


def _roll(rng: random.Random, rate: float) -> bool:
    return rate > 0.0 and rng.random() < rate


class TokenBucket:
    """Admits ``rate`` calls per second on average with bursts of up to ``burst``."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._updated = now

    def take(self, now: float) -> float:
        """Take one token: 0.0 if admitted, else seconds until a token will be available."""
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate


# --------------------------------------------------------------------------- stats


@dataclass
class Stats:
    """Counters for GET /stats. ``inputs`` and ``tokens`` count successfully served calls;
    ``calls`` counts every embeddings request, whatever its outcome. The Batch API's apart:
    ``batches`` created, and the ``batch_inputs`` and ``batch_tokens`` of their lines answered
    200 (counted when a batch ends), what a provider bills at its batch price."""

    calls: int = 0
    inputs: int = 0
    tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    peak_concurrency: int = 0
    in_flight: int = 0
    rejected_429: int = 0
    batches: int = 0
    batch_inputs: int = 0
    batch_tokens: int = 0
    # Calls received and not yet answered (waiting for capacity or served): what a fleet of
    # clients sends at once. Time spent with more of them than the capacity is time a
    # client's call queued behind others'.
    received: int = 0
    peak_received: int = 0
    over_capacity_s: float = 0.0  # in all
    longest_over_capacity_s: float = 0.0  # the longest stretch
    _over_since: float | None = None

    def record_error(self, status: int) -> None:
        key = str(status)
        self.errors[key] = self.errors.get(key, 0) + 1
        if status == 429:
            self.rejected_429 += 1

    def record_served(self, request: EmbeddingRequest) -> None:
        self.inputs += len(request.inputs)
        self.tokens += request.total_tokens

    def served_batch(self, inputs: int, tokens: int) -> None:
        self.batch_inputs += inputs
        self.batch_tokens += tokens

    def enter(self) -> None:
        self.in_flight += 1
        self.peak_concurrency = max(self.peak_concurrency, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1

    def arrive(self, now: float, capacity: int) -> None:
        """A call was received (before it waits for capacity)."""
        self.received += 1
        self.peak_received = max(self.peak_received, self.received)
        if self.received > capacity and self._over_since is None:
            self._over_since = now

    def depart(self, now: float, capacity: int) -> None:
        """A call received was answered (whatever the answer)."""
        self.received -= 1
        if self.received <= capacity and self._over_since is not None:
            stretch = now - self._over_since
            self.over_capacity_s += stretch
            self.longest_over_capacity_s = max(self.longest_over_capacity_s, stretch)
            self._over_since = None

    def reset(self) -> None:
        """Zero the counters; calls still being served stay counted as in flight."""
        self.calls = self.inputs = self.tokens = self.rejected_429 = 0
        self.batches = self.batch_inputs = self.batch_tokens = 0
        self.errors = {}
        self.peak_concurrency = self.in_flight
        self.peak_received = self.received
        self.over_capacity_s = self.longest_over_capacity_s = 0.0

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in dataclasses.asdict(self).items() if not k.startswith("_")}
