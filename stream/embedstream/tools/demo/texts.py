"""Sample texts for the demo: mixed lengths, deterministic for a seed."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

WORDS = (
    "stream", "batch", "token", "vector", "kafka", "offset", "latency", "backlog",
    "partition", "consumer", "embedding", "search", "retrieval", "document", "query", "model",
    "provider", "window", "priority", "lane", "budget", "signal", "river", "harbor",
    "lantern", "meadow", "orbit", "quartz", "velvet", "ember", "summit", "canyon",
)  # fmt: skip


def sample_texts(n: int, seed: int = 7) -> list[str]:
    """The first ``n`` texts of :func:`text_stream`."""
    return list(itertools.islice(text_stream(seed), n))


def text_stream(seed: int = 7) -> Iterator[str]:
    """Mostly short queries, some paragraphs, a few long documents, as many as asked for;
    each starts with its number, so no two are identical (identical texts in one batch are
    sent once)."""
    rng = random.Random(seed)
    for i in itertools.count():
        roll = rng.random()
        words = rng.randint(3, 12) if roll < 0.6 else rng.randint(40, 120) if roll < 0.95 else 600
        yield f"#{i} " + " ".join(rng.choice(WORDS) for _ in range(words))
