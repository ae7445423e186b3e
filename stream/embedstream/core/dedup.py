"""In-batch deduplication: identical inputs in one bucket are sent once and fanned out.

A bucket already fixes model, format and dimensions, so equal input means an equal vector.
"""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.wire.openai import Input


def unique_texts(texts: Sequence[Input]) -> tuple[list[Input], list[int]]:
    """(distinct inputs in first-seen order, for each input the index of its distinct one)."""
    position: dict[Input, int] = {}
    distinct: list[Input] = []
    mapping: list[int] = []
    for text in texts:
        index = position.get(text)
        if index is None:
            index = position[text] = len(distinct)
            distinct.append(text)
        mapping.append(index)
    return distinct, mapping
