"""Sample texts for the demo: mixed lengths, deterministic for a seed."""

from __future__ import annotations

import random

WORDS = (
    "stream", "batch", "token", "vector", "kafka", "offset", "latency", "backlog",
    "partition", "consumer", "embedding", "search", "retrieval", "document", "query", "model",
    "provider", "window", "priority", "lane", "budget", "signal", "river", "harbor",
    "lantern", "meadow", "orbit", "quartz", "velvet", "ember", "summit", "canyon",
)  # fmt: skip


def sample_texts(n: int, seed: int = 7) -> list[str]:
    """Mostly short queries, some paragraphs, a few long documents; each starts with its
    number, so no two are identical (identical texts in one batch are sent once)."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        roll = rng.random()
        words = rng.randint(3, 12) if roll < 0.6 else rng.randint(40, 120) if roll < 0.95 else 600
        texts.append(f"#{i} " + " ".join(rng.choice(WORDS) for _ in range(words)))
    return texts
