from __future__ import annotations

import pytest
from embedstream.core.dedup import unique_texts
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("texts", "distinct", "mapping"),
    [
        ([], [], []),
        (["a"], ["a"], [0]),
        (["a", "b", "a", "a", "c", "b"], ["a", "b", "c"], [0, 1, 0, 0, 2, 1]),
        (["a", "A", "a "], ["a", "A", "a "], [0, 1, 2]),  # exact text only
    ],
)
def test_unique_texts(texts: list[str], distinct: list[str], mapping: list[int]) -> None:
    assert unique_texts(texts) == (distinct, mapping)


@given(st.lists(st.sampled_from(["x", "y", "z", "w"]), max_size=40))
def test_fan_out_restores_every_input(texts: list[str]) -> None:
    distinct, mapping = unique_texts(texts)
    assert len(set(distinct)) == len(distinct)
    assert [distinct[i] for i in mapping] == texts
