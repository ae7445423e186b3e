"""In-batch deduplication: identical inputs in one bucket are sent once and fanned out.

A bucket already fixes model, format and dimensions, so equal input means an equal vector.
"""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.wire.openai import Input


def unique_texts(texts: Sequence[Input]) -> tuple[list[Input], list[int]]:
    """(distinct inputs in first-seen order, for each input the index of its distinct one)."""
    position: dict[Input, int] = dict.fromkeys(texts, 0)  # first-seen order, built in C
    if len(position) == len(texts):  # the usual batch: nothing repeated
        return list(texts), list(range(len(texts)))
    distinct = list(position)
    for index, text in enumerate(distinct):
        position[text] = index
    return distinct, list(map(position.__getitem__, texts))
