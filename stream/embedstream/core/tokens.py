"""Token estimates used to keep batches under provider limits before calling the provider.

The default estimator is tokenizer-free: ``ceil(utf8_bytes / 3) + 1``. BPE tokenizers such as
OpenAI's cl100k average about 4 bytes per token on prose and rarely fewer than 3 on code or
non-Latin text, so the estimate errs high; its stated margin is that it never falls more than
one third below a count that spends at least 2 bytes per token. Plug a real tokenizer where exact
counts matter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    # An ASCII text's UTF-8 is as long as the text (isascii() is a flag CPython keeps): no copy.
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return -(-size // 3) + 1  # tokens_of_bytes(size), without its call


def apportion(total: int, estimates: Sequence[int]) -> list[int]:
    """``total`` (a call's count, as the provider reported it) shared by ``estimates``, each in
    proportion and whole, summing to ``total`` exactly (largest remainders get the rest)."""
    weight = sum(estimates)
    if not estimates:
        return []
    if weight <= 0:
        estimates, weight = [1] * len(estimates), len(estimates)
    exact = [total * e / weight for e in estimates]
    shares = [int(x) for x in exact]
    left = total - sum(shares)
    if not left:
        return shares
    # Largest remainders first (ties: the earlier item); the keys in a list, read in C.
    behind = [share - x for share, x in zip(shares, exact, strict=True)]
    for i in sorted(range(len(exact)), key=behind.__getitem__)[:left]:
        shares[i] += 1
    return shares


def tokens_of_bytes(size: int) -> int:
    """The estimate of a text of ``size`` UTF-8 bytes (what :func:`estimate_tokens` counts)."""
    return -(-size // 3) + 1
