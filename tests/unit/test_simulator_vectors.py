"""The simulator's vectors are the same numbers with numpy and without it (a verifier without
numpy checks a simulator with it), and base64 carries exactly the float list's numbers."""

from __future__ import annotations

import pytest
from embedsim import vectors
from embedsim.vectors import (
    decode_base64,
    encode_base64,
    expected_vector,
    expected_vector_base64,
)
from hypothesis import given
from hypothesis import strategies as st

texts = st.text(max_size=80)
dimensions = st.sampled_from([1, 2, 3, 7, 256, 1536])


@pytest.mark.skipif(vectors._np is None, reason="numpy is not installed")
@given(text=texts, model=st.sampled_from(["m", "text-embedding-3-small"]), dims=dimensions)
def test_numpy_and_pure_python_give_identical_vectors(text: str, model: str, dims: int) -> None:
    with_numpy = expected_vector(model, text, dims)
    numpy = vectors._np
    vectors._np = None
    try:
        pure = expected_vector(model, text, dims)
    finally:
        vectors._np = numpy
    assert with_numpy == pure


@given(text=texts, dims=dimensions)
def test_base64_is_the_float_vector(text: str, dims: int) -> None:
    vector = expected_vector("m", text, dims)
    assert expected_vector_base64("m", text, dims) == encode_base64(vector)
    assert decode_base64(expected_vector_base64("m", text, dims)) == vector


def test_unit_norm_and_prefix_stable() -> None:
    long, short = expected_vector("m", "hello", 256), expected_vector("m", "hello", 8)
    assert sum(c * c for c in long) == pytest.approx(1.0, abs=1e-6)
    scale = sum(c * c for c in long[:8]) ** 0.5
    assert short == pytest.approx([c / scale for c in long[:8]], abs=1e-6)
