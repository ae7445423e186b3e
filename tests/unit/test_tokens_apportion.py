"""A call's usage shared by its inputs: in proportion to their estimates, whole numbers that
sum to what the provider counted (rounding each share alone lost or made up tokens)."""

from __future__ import annotations

import pytest
from embedstream.core.tokens import apportion, estimate_tokens
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("total", "estimates", "shares"),
    [
        (1, [3, 3], [1, 0]),  # each rounded alone: 0 + 0
        (10, [1, 1, 1], [4, 3, 3]),
        (9, [1, 2], [3, 6]),
        (0, [5, 5], [0, 0]),
        (4, [0, 0], [2, 2]),  # no estimate: even shares
        (7, [], []),
    ],
)
def test_shares_are_proportional_and_whole(
    total: int, estimates: list[int], shares: list[int]
) -> None:
    assert apportion(total, estimates) == shares


@given(st.integers(0, 10**6), st.lists(st.integers(0, 10**4), min_size=1, max_size=50))
def test_shares_sum_to_the_providers_count(total: int, estimates: list[int]) -> None:
    shares = apportion(total, estimates)
    assert sum(shares) == total
    weight = sum(estimates) or len(estimates)
    for share, estimate in zip(shares, estimates, strict=True):
        exact = total * (estimate if sum(estimates) else 1) / weight
        assert exact - 1 < share < exact + 1


def _largest_remainders(total: int, estimates: list[int]) -> list[int]:
    """The rule as first written: every share rounded down, then one more each for the
    largest remainders (ties to the earlier input) until the count is reached."""
    weight = sum(estimates)
    if weight <= 0:
        estimates, weight = [1] * len(estimates), len(estimates)
    exact = [total * e / weight for e in estimates]
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: shares[i] - exact[i])
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


@given(st.integers(-50, 10**6), st.lists(st.integers(0, 10**4), min_size=1, max_size=80))
def test_the_same_shares_as_the_rule_item_by_item(total: int, estimates: list[int]) -> None:
    assert apportion(total, estimates) == _largest_remainders(total, estimates)


@given(st.text(max_size=300))
def test_the_estimate_counts_utf8_bytes(text: str) -> None:
    """The ASCII shortcut (no encoding) gives what the UTF-8 length gives."""
    assert estimate_tokens(text) == -(-len(text.encode("utf-8")) // 3) + 1


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 1), ("abc", 2), ("abcd", 3), ("é", 2), ("日本", 3)]
)
def test_estimates(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens
