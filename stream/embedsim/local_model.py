"""Real vectors for the simulator: WordLlama's small static model, loaded from its own wheel.

The ``wordllama`` wheel (the ``local-model`` extra) ships the weights and tokenizer of its
``l2_supercat`` model inside the package, so nothing is downloaded: the model is loaded with
the package folder as its cache, downloads disabled (its default lookup searches the working
directory and a user cache, and misses the bundled tokenizer). The vectors are Matryoshka-like
(a prefix of the 256 components is a usable shorter vector), so ``dimensions`` keeps that many
components and renormalises, as OpenAI's shortened embeddings do.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

WORDLLAMA_MODEL = "l2_supercat"
WORDLLAMA_DIMENSIONS = 256


class LocalModelUnavailable(RuntimeError):
    """The ``wordllama`` package is missing, or its bundled model did not load."""


class VectorSource(Protocol):
    """Where a backend's vectors come from: unit float32 vectors, one per text."""

    def vectors(self, texts: Sequence[str], dimensions: int) -> list[list[float]]: ...


class WordLlamaVectors:
    """WordLlama's bundled model, loaded once per process (under a lock) and shared by every
    server of the process: it is read-only, and loading costs about half a second."""

    _shared: Any = None
    _lock = threading.Lock()

    def load(self) -> None:
        """Load the model now, so the first call is not the slow one."""
        with WordLlamaVectors._lock:
            if WordLlamaVectors._shared is None:
                WordLlamaVectors._shared = _load_bundled()

    def vectors(self, texts: Sequence[str], dimensions: int) -> list[list[float]]:
        if not 1 <= dimensions <= WORDLLAMA_DIMENSIONS:
            raise ValueError(f"dimensions must be in 1..{WORDLLAMA_DIMENSIONS}, got {dimensions}")
        self.load()
        import numpy as np

        raw = np.asarray(WordLlamaVectors._shared.embed(list(texts), norm=False), dtype=np.float64)
        raw = raw.reshape(len(texts), -1)[:, :dimensions]
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        # A text without a known token (an empty one) pools to zeros: answer a unit vector
        # anyway, as the hash backend does, never NaN.
        empty = (norms[:, 0] == 0.0) | ~np.isfinite(norms[:, 0])
        unit = np.where(empty[:, None], 0.0, raw / np.where(norms == 0.0, 1.0, norms))
        unit[empty, 0] = 1.0
        rows: list[list[float]] = unit.astype(np.float32).tolist()
        return rows


def _load_bundled() -> Any:
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        raise LocalModelUnavailable(
            "the wordllama backend needs the 'local-model' extra: "
            "pip install 'embedstream[local-model]'"
        ) from None
    package_dir = Path(wordllama.__file__).parent
    try:
        return WordLlama.load(WORDLLAMA_MODEL, cache_dir=package_dir, disable_download=True)
    except (OSError, ValueError) as exc:  # FileNotFoundError: a wheel without the weights
        raise LocalModelUnavailable(f"wordllama's bundled model did not load: {exc}") from exc
