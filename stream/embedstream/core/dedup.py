"""In-batch deduplication: identical texts in one bucket are sent once and fanned out.

A bucket already fixes model, format and dimensions, so equal text means an equal vector.
"""

from __future__ import annotations

from collections.abc import Sequence


def unique_texts(texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """(distinct texts in first-seen order, for each input the index of its distinct text)."""
    position: dict[str, int] = {}
    distinct: list[str] = []
    mapping: list[int] = []
    for text in texts:
        index = position.get(text)
        if index is None:
            index = position[text] = len(distinct)
            distinct.append(text)
        mapping.append(index)
    return distinct, mapping
