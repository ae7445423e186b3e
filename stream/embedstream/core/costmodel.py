"""What a call costs: ``L = base + per_token * tokens + per_item * items``, learned online.

One :class:`LatencyFit` per bucket (model, format, dimensions) fits the three coefficients to
observed (tokens, items, seconds) by exponentially weighted least squares, as Clipper and
BentoML fit their batchers' latency curves. Three choices make it usable from the first call:

- **A prior.** The fit is a ridge regression pulled towards :data:`PRIOR` with the weight of
  a tenth of an observation, so before any call (and after a long silence, as old
  observations fade) it answers with plausible figures, and collinear data (every text about
  as long as the others, so tokens ~ items) cannot send the coefficients to wild opposite
  values. Weak, because the intercept sits far from the data (calls of 0 items): a prior of
  one observation biased a 2 ms base by another 2 ms after a hundred calls.
- **Forgetting.** Observations lose half their weight every ``half_life_s`` of the injected
  clock, and each new call fades the earlier ones a little (about ``MEMORY_CALLS`` are
  remembered), so a provider that slows down or speeds up is followed within a minute, or
  within a hundred calls when calls are frequent.
- **Robustness.** A call far off the current fit (a pause, a queue at the provider) counts
  with a weight that shrinks with its distance (Huber), so one outlier cannot move the fit.

Coefficients never go negative: a negative base or slope would make splitting look free.
Pure: time comes in as ``now``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from embedstream.core.lanes import BucketKey


@dataclass(frozen=True, slots=True)
class CallCost:
    """Seconds one call takes: a fixed part, and parts per estimated token and per input."""

    base_s: float
    per_token_s: float
    per_item_s: float

    def latency(self, tokens: float, items: float) -> float:
        return self.base_s + self.per_token_s * tokens + self.per_item_s * items


# Before any observation: a hosted API's round trip and a modest model (50k tokens/s).
PRIOR = CallCost(base_s=0.05, per_token_s=2e-5, per_item_s=0.0)

# The prior weighs as much as this many observations of each effect at these typical sizes.
PRIOR_WEIGHT = 0.1
TOKEN_SCALE = 100.0
ITEM_SCALE = 10.0
HALF_LIFE_S = 60.0
# At high call rates time alone would remember thousands of calls and follow a change
# slowly; each call also fades the ones before it, so about this many calls are remembered.
MEMORY_CALLS = 100
# Residuals beyond this many mean absolute residuals count with weight HUBER_K * scale / |r|.
HUBER_K = 3.0
SCALE_FLOOR = 0.02  # of the predicted latency: misfits under 6% always count fully
# Until this much weight is remembered every call counts fully: a fit that rests on the prior
# alone has no residuals worth trusting, and must be free to move to the real provider.
ROBUST_AFTER = 5.0


class LatencyFit:
    """Exponentially weighted ridge regression of latency on (1, tokens, items)."""

    def __init__(
        self,
        prior: CallCost = PRIOR,
        *,
        half_life_s: float = HALF_LIFE_S,
        prior_weight: float = PRIOR_WEIGHT,
    ) -> None:
        if not half_life_s > 0 or not prior_weight > 0:
            raise ValueError("half_life_s and prior_weight must be > 0")
        self.prior = prior
        self.half_life_s = half_life_s
        self._prior_theta = (prior.base_s, prior.per_token_s, prior.per_item_s)
        self._ridge = (prior_weight, prior_weight * TOKEN_SCALE**2, prior_weight * ITEM_SCALE**2)
        # Weighted sufficient statistics: sum w x x^T (upper triangle), sum w x y, sum w.
        self._xx = [[0.0] * 3 for _ in range(3)]
        self._xy = [0.0] * 3
        self.weight = 0.0  # effective number of observations still remembered
        self.observations = 0
        self._at: float | None = None
        self._scale: float | None = None  # EW mean absolute residual, seconds
        self._cost: CallCost | None = prior

    def observe(self, tokens: float, items: float, latency_s: float, now: float) -> None:
        """Learn from one call. Non-finite or non-positive latencies carry no information."""
        if not (math.isfinite(latency_s) and latency_s > 0) or tokens < 0 or items < 1:
            return
        self._decay(now)
        predicted = self.cost().latency(tokens, items)
        residual = abs(latency_s - predicted)
        # A floor keeps a fit of noise-free data from calling every small misfit an outlier.
        scale = max(self._scale or 0.1 * latency_s, SCALE_FLOOR * predicted)
        weight = 1.0
        if self.weight >= ROBUST_AFTER and residual > HUBER_K * scale:
            weight = HUBER_K * scale / residual
        # The scale follows the typical residual, itself capped so an outlier barely moves it.
        self._scale = 0.9 * scale + 0.1 * min(residual, HUBER_K * scale)
        x = (1.0, float(tokens), float(items))
        for i in range(3):
            for j in range(i, 3):
                self._xx[i][j] += weight * x[i] * x[j]
            self._xy[i] += weight * x[i] * latency_s
        self.weight += weight
        self.observations += 1
        self._cost = None

    def cost(self) -> CallCost:
        """The current coefficients (the prior's until observations arrive)."""
        if self._cost is None:
            self._cost = self._solve()
        return self._cost

    def _decay(self, now: float) -> None:
        if self._at is not None:
            factor = 1.0 - 1.0 / MEMORY_CALLS
            if now > self._at:
                factor *= 0.5 ** ((now - self._at) / self.half_life_s)
            for row in self._xx:
                for j in range(3):
                    row[j] *= factor
            self._xy = [v * factor for v in self._xy]
            self.weight *= factor
            self._cost = None
        self._at = now if self._at is None else max(self._at, now)

    def _solve(self) -> CallCost:
        """Ridge normal equations towards the prior; a coefficient that comes out negative
        is pinned to 0 and the rest solved again (an active set of at most three steps)."""
        free = [0, 1, 2]
        theta = [0.0, 0.0, 0.0]
        while free:
            a = [[self._xx[min(i, j)][max(i, j)] for j in free] for i in free]
            rhs = [self._xy[i] + self._ridge[i] * self._prior_theta[i] for i in free]
            for row, i in enumerate(free):
                a[row][row] += self._ridge[i]
            solution = _solve_linear(a, rhs)
            worst = min(range(len(free)), key=lambda r: solution[r])
            if solution[worst] >= 0:
                for row, i in enumerate(free):
                    theta[i] = solution[row]
                break
            theta[free[worst]] = 0.0
            del free[worst]
        return CallCost(*theta)


def _solve_linear(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting; ``a`` is positive definite (ridge > 0)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def cost_key(key: BucketKey) -> tuple[str, str, int | None]:
    """What a call's cost depends on: its bucket without the lane."""
    return (key.model, key.encoding_format, key.dimensions)


# Distinct (model, format, dimensions) buckets remembered; the least recently used goes first.
MAX_BUCKETS = 256


class CostModels:
    """One :class:`LatencyFit` per bucket key, created from the prior on first use."""

    def __init__(
        self,
        prior: CallCost = PRIOR,
        *,
        half_life_s: float = HALF_LIFE_S,
        max_buckets: int = MAX_BUCKETS,
    ) -> None:
        self.prior = prior
        self.half_life_s = half_life_s
        self.max_buckets = max_buckets
        self._fits: OrderedDict[Hashable, LatencyFit] = OrderedDict()

    def observe(
        self, key: Hashable, tokens: float, items: float, latency_s: float, now: float
    ) -> None:
        """One finished call of ``items`` inputs and ``tokens`` estimated tokens."""
        self.fit(key).observe(tokens, items, latency_s, now)

    def cost(self, key: Hashable) -> CallCost:
        fit = self._fits.get(key)
        return fit.cost() if fit is not None else self.prior

    def fit(self, key: Hashable) -> LatencyFit:
        fit = self._fits.get(key)
        if fit is None:
            fit = self._fits[key] = LatencyFit(self.prior, half_life_s=self.half_life_s)
            if len(self._fits) > self.max_buckets:
                self._fits.popitem(last=False)
        else:
            self._fits.move_to_end(key)
        return fit
