"""What `embedstream bench` sends: distinct texts of a given size, and Poisson arrival times.

Pure and seeded: the same seed gives the same texts and arrivals on every machine.
"""

from __future__ import annotations

import random

from embedsim.model import count_tokens

# Short common words (about 3 letters): with their spaces, about 4 characters per token, so
# 30 tokens make about 120 characters, the size of the reference setting.
_VOCABULARY = (
    "the of and to in is for on with that it as be by at from this or an are was we can "
    "all new use one get set map key row log job api run top end day way few old big low "
    "high text data time code file user task list node team case plan test edit view"
)
WORDS = _VOCABULARY.split()


def make_text(rng: random.Random, index: int, tokens: int) -> str:
    """A text of exactly ``tokens`` simulator tokens, starting with its index so that no two
    texts are equal (the engine's deduplication must not help it here)."""
    parts = [str(index)]
    while len(parts) < tokens:
        parts.append(rng.choice(WORDS))
    return " ".join(parts)


def make_texts(count: int, *, tokens: int = 30, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [make_text(rng, i, tokens) for i in range(count)]


def mean_tokens(texts: list[str]) -> float:
    """Mean simulator tokens per text: what the latency model charges for."""
    return sum(count_tokens(t) for t in texts) / len(texts) if texts else 0.0


def poisson_arrivals(rate_per_s: float, duration_s: float, *, seed: int = 1) -> list[float]:
    """Arrival offsets (seconds, ascending) of a Poisson process over ``[0, duration_s)``."""
    if not rate_per_s > 0:
        raise ValueError(f"rate must be > 0, got {rate_per_s}")
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = rng.expovariate(rate_per_s)
    while t < duration_s:
        arrivals.append(t)
        t += rng.expovariate(rate_per_s)
    return arrivals
