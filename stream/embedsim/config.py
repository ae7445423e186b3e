"""Every knob of the simulated provider: which provider it imitates, latency, faults, limits.
Validated at construction, so a bad value from the command line or /admin/faults is refused."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from embedsim.flavors import Flavor, Limits, flavor_named
from embedsim.local_model import WORDLLAMA_DIMENSIONS

# Where vectors come from: "hash" (deterministic per (model, text), the default of tests and
# benchmarks) or "wordllama" (a real small model bundled in its wheel, for the quick start).
MODEL_BACKENDS = ("hash", "wordllama")


@dataclass(frozen=True)
class SimulatorConfig:
    """Every knob of the simulator. Faults all default to off.

    Rates are probabilities per call in [0, 1]; a rate-limit value of 0 disables it.
    """

    # Which provider to imitate (flavors.py): URL shape, authentication, limits, errors.
    flavor: str = "openai"
    # The one model a tei, vllm or ollama server serves: vllm and ollama answer 404 for other
    # names, tei embeds with it whatever was asked. None: any name is served as asked.
    served_model: str | None = None
    model_backend: str = "hash"
    matryoshka: bool = True  # vllm: the model can shorten its vectors (`dimensions`)
    default_dimensions: int = 256
    max_dimensions: int = 3072
    limits: Limits | None = None  # None: the flavor's; a dict changes OpenAI's defaults
    # Latency of one call: base_ms + per_token_ms * tokens + per_input_ms * inputs.
    base_ms: float = 5.0
    per_token_ms: float = 0.0
    per_input_ms: float = 0.0
    capacity: int = 16  # calls served at once; the rest queue
    rate_limit_rps: float = 0.0  # token bucket over calls, burst of max(1, rps)
    # Budgets announced in x-ratelimit-* headers (see quota.py); 0 disables each.
    rate_limit_rpm: float = 0.0
    rate_limit_tpm: float = 0.0
    rate_limit_burst_s: float = 60.0  # seconds of refill the budgets hold
    rate_limit_for_s: float = 0.0  # answer 429 to everything for this long after start/set
    error_rate: float = 0.0  # answer 500
    hang_rate: float = 0.0  # wait hang_s before answering
    hang_s: float = 3600.0
    shuffle_rate: float = 0.0  # return `data` out of index order
    reject_texts_containing: str | None = None  # 400 naming the first input containing it
    # Flaky items: a call holding a text containing this answers 500 until that text has
    # failed `fail_times` times; later calls succeed (tests "fails twice, then succeeds").
    fail_texts_containing: str | None = None
    fail_times: int = 0
    record_calls: bool = False  # keep a CallRecord per call (tests check call timing)
    # The Batch API (/v1/files, /v1/batches; batches.py): how long a batch spends in each
    # state, its completion window (a batch still in progress then expires with what it
    # did), the chance a line fails alone (a 500 line), OpenAI's limits per batch, and the
    # tokens a model may have enqueued at once (0: no limit; a batch above it fails).
    batch_validating_s: float = 0.0
    batch_completion_s: float = 1.0  # in progress: its lines done at an even pace
    batch_finalizing_s: float = 0.0
    batch_cancelling_s: float = 0.0
    batch_window_s: float = 86_400.0  # what "24h" means here
    batch_line_error_rate: float = 0.0
    batch_max_requests: int = 50_000
    batch_max_bytes: int = 200 * 1024 * 1024
    batch_enqueued_tokens: int = 0
    auth_key: str | None = None  # required "Authorization: Bearer <key>" when set
    seed: int = 0

    def __post_init__(self) -> None:
        flavor_named(self.flavor)  # ValueError for an unknown one
        if self.model_backend not in MODEL_BACKENDS:
            raise ValueError(
                f"unknown model_backend {self.model_backend!r}; known: {', '.join(MODEL_BACKENDS)}"
            )
        if self.served_model == "":
            raise ValueError("served_model must not be empty (use None to serve any name)")
        if self.max_dimensions < 1:
            raise ValueError("max_dimensions must be >= 1")
        if not 1 <= self.default_dimensions <= self.dimension_cap:
            raise ValueError(f"default_dimensions must be in 1..{self.dimension_cap}")
        if self.capacity < 1:
            raise ValueError("capacity must be >= 1")
        for name in ("error_rate", "hang_rate", "shuffle_rate", "batch_line_error_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        non_negative = (
            *("base_ms", "per_token_ms", "per_input_ms"),
            *("rate_limit_rps", "rate_limit_rpm", "rate_limit_tpm"),
        )
        batch_times = ("batch_validating_s", "batch_completion_s", "batch_finalizing_s",
                       "batch_cancelling_s")  # fmt: skip
        for name in (*non_negative, *batch_times, "rate_limit_for_s", "hang_s"):
            if not getattr(self, name) >= 0.0:  # also rejects NaN
                raise ValueError(f"{name} must be >= 0")
        if not self.batch_window_s > 0:
            raise ValueError("batch_window_s must be > 0")
        for name in ("batch_max_requests", "batch_max_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.batch_enqueued_tokens < 0:
            raise ValueError("batch_enqueued_tokens must be >= 0 (0: no limit)")
        if not self.rate_limit_burst_s > 0:
            raise ValueError("rate_limit_burst_s must be > 0")
        if self.reject_texts_containing == "":
            raise ValueError("reject_texts_containing must not be empty (use None to disable)")
        if self.fail_texts_containing == "":
            raise ValueError("fail_texts_containing must not be empty (use None to disable)")
        if self.fail_times < 0:
            raise ValueError("fail_times must be >= 0")

    @property
    def flavor_rules(self) -> Flavor:
        return flavor_named(self.flavor)

    @property
    def dimension_cap(self) -> int:
        """The largest ``dimensions`` served: the setting, and the real model's own length."""
        if self.model_backend == "wordllama":
            return min(self.max_dimensions, WORDLLAMA_DIMENSIONS)
        return self.max_dimensions

    @property
    def request_limits(self) -> Limits:
        return self.limits if self.limits is not None else self.flavor_rules.limits

    def replace(self, **changes: object) -> SimulatorConfig:
        """A copy with ``changes`` applied, type-checked so JSON from /admin/faults is safe."""
        return dataclasses.replace(self, **_coerce_changes(SimulatorConfig, changes))

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _coerce_changes(cls: type[object], changes: Mapping[str, object]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    unknown = sorted(changes.keys() - hints.keys())
    if unknown:
        raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
    return {name: _coerce(name, hints[name], value) for name, value in changes.items()}


def _coerce(name: str, hint: object, value: object) -> object:
    # bool is an int subclass, so it is excluded explicitly from the numeric kinds.
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is bool and isinstance(value, bool):
        return value
    if hint is str and isinstance(value, str):
        return value
    if hint == (str | None) and (value is None or isinstance(value, str)):
        return value
    if hint == (Limits | None):
        if value is None or isinstance(value, Limits):
            return value
        if isinstance(value, dict):
            return Limits().replace(**value)
    raise ValueError(f"invalid value for {name}: {value!r}")
