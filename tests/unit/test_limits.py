"""Provider limits: profiles, the user's narrowing, item admission and batch checks."""

from __future__ import annotations

from typing import get_args

import pytest
from embedstream.core.limits import (
    AZURE_DIMENSIONS_SINCE,
    PROFILES,
    REQUEST_PARAMETERS,
    ItemProblem,
    ProviderLimits,
    UnknownProfile,
    batch_violations,
    check_item,
    effective_limits,
    profile,
)
from embedstream.settings import ProviderProfile
from embedstream.settings.derived import buffered_items_bound
from hypothesis import given
from hypothesis import strategies as st

BOTH = frozenset({"float", "base64"})
SMALL = ProviderLimits(3, 10, 25, frozenset({"float"}))


USER = frozenset({"user"})


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # token_ids: the online lane passes token-id inputs through (OpenAI, Azure, vLLM).
        ("openai", ProviderLimits(2048, 8192, 300_000, BOTH, parameters=USER, token_ids=True)),
        ("azure", ProviderLimits(2048, 8191, 300_000, BOTH,
                                 parameters=frozenset({"user", "input_type"}), token_ids=True)),
        ("vllm", ProviderLimits(2048, 32_768, 1_000_000, BOTH, parameters=USER, token_ids=True)),
        # TEI's default --max-client-batch-size is 32 inputs.
        ("tei", ProviderLimits(32, 32_768, 500_000, BOTH, parameters=USER)),
        ("ollama", ProviderLimits(2048, 32_768, 1_000_000, BOTH)),
        ("dashscope", ProviderLimits(10, 8192, 80_000, frozenset({"float"}))),
        ("generic", ProviderLimits(2048, 32_768, 1_000_000, BOTH,
                                   parameters=frozenset(REQUEST_PARAMETERS), token_ids=True)),
    ],
)  # fmt: skip
def test_profiles(name: str, expected: ProviderLimits) -> None:
    assert profile(name) == expected
    assert PROFILES[name] == expected


def test_every_profile_setting_value_has_limits() -> None:
    assert set(PROFILES) == set(get_args(ProviderProfile))


def test_wire_format_is_base64_where_the_provider_takes_it() -> None:
    assert profile("openai").wire_format == "base64"
    assert profile("dashscope").wire_format == "float"


def test_unknown_profile_lists_known_names() -> None:
    with pytest.raises(UnknownProfile) as info:
        profile("bedrock")
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, ValueError)
    assert str(info.value) == (
        "unknown provider profile 'bedrock'; known: azure, dashscope, generic, ollama, openai, "
        "tei, vllm"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_inputs": 0},
        {"max_tokens_per_input": -1},
        {"max_tokens_per_request": 0},
        {"max_inputs": True},
        {"max_tokens_per_input": 30},  # larger than the request limit: could never be sent
        {"encoding_formats": frozenset()},
        {"encoding_formats": frozenset({"float", "int8"})},
    ],
)
def test_invalid_limits(kwargs: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "max_inputs": 3,
        "max_tokens_per_input": 10,
        "max_tokens_per_request": 25,
        "encoding_formats": frozenset({"float"}),
    }
    with pytest.raises(ValueError):
        ProviderLimits(**{**fields, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("base", "size", "batch_tokens", "input_tokens", "expected"),
    [
        # the user is tighter on everything
        (
            "openai",
            256,
            100_000,
            4096,
            ProviderLimits(256, 4096, 100_000, BOTH, parameters=USER, token_ids=True),
        ),
        # the provider is tighter on everything
        ("dashscope", 256, 100_000, 10_000, ProviderLimits(10, 8192, 80_000, frozenset({"float"}))),
        # mixed
        ("ollama", 4096, 50_000, 8192, ProviderLimits(2048, 8192, 50_000, BOTH)),
    ],
)
def test_effective_limits(
    base: str, size: int, batch_tokens: int, input_tokens: int, expected: ProviderLimits
) -> None:
    got = effective_limits(
        profile(base),
        max_batch_size=size,
        max_batch_tokens=batch_tokens,
        max_input_tokens=input_tokens,
    )
    assert got == expected


def test_effective_limits_rejects_non_positive_settings() -> None:
    with pytest.raises(ValueError):
        effective_limits(
            profile("openai"), max_batch_size=0, max_batch_tokens=1, max_input_tokens=1
        )


@pytest.mark.parametrize(
    ("limits", "text", "tokens", "fmt", "reason"),
    [
        (SMALL, "hello", 2, "float", None),
        (SMALL, "", 1, "float", "empty_text"),
        (SMALL, " \t\n", 1, "float", "empty_text"),
        (ProviderLimits(3, 10, 25, BOTH, reject_empty=False), "", 1, "float", None),
        (SMALL, "x" * 40, 10, "float", None),  # exactly at the limit is allowed
        (SMALL, "x" * 44, 11, "float", "too_long"),
        (SMALL, "hello", 2, "base64", "unsupported_encoding_format"),
        (SMALL, "", 11, "base64", "empty_text"),  # the first problem wins
        (SMALL, "hello", 11, "base64", "too_long"),
    ],
)
def test_check_item(
    limits: ProviderLimits, text: str, tokens: int, fmt: str, reason: str | None
) -> None:
    problem = check_item(limits, text=text, tokens=tokens, encoding_format=fmt)
    assert (problem.reason if problem else None) == reason


@pytest.mark.parametrize(
    ("limits", "dimensions", "parameters", "reason"),
    [
        (profile("openai"), 256, ["user"], None),
        (ProviderLimits(3, 10, 25, BOTH, dimensions=False), 256, [], "unsupported_dimensions"),
        (ProviderLimits(3, 10, 25, BOTH, dimensions=False), None, [], None),
        (profile("openai"), None, ["input_type"], "unsupported_parameter"),
        (profile("ollama"), None, ["user"], "unsupported_parameter"),
        (profile("azure"), None, ["user", "input_type"], None),
        (profile("generic"), 8, ["user", "input_type", "task"], None),
    ],
)
def test_check_item_refuses_what_the_profile_does_not_take(
    limits: ProviderLimits, dimensions: int | None, parameters: list[str], reason: str | None
) -> None:
    problem = check_item(
        limits, text="hi", tokens=2, encoding_format="float", dimensions=dimensions,
        parameters=parameters, profile_name="p",
    )  # fmt: skip
    assert (problem.reason if problem else None) == reason
    if problem is not None:
        assert problem.message.startswith("provider profile p takes no `")


@pytest.mark.parametrize(
    ("version", "dimensions"),
    [("2023-05-15", False), ("2024-02-01", False), (AZURE_DIMENSIONS_SINCE + "-preview", True),
     ("2024-10-21", True)],
)  # fmt: skip
def test_azure_takes_dimensions_from_api_version_2024_03_01(version: str, dimensions: bool) -> None:
    limits = effective_limits(
        profile("azure"), max_batch_size=8, max_batch_tokens=100, max_input_tokens=10,
        azure_api_version=version,
    )  # fmt: skip
    assert limits.dimensions is dimensions


def test_too_long_message_states_estimate_and_limit() -> None:
    assert check_item(SMALL, text="long", tokens=11, encoding_format="float") == ItemProblem(
        "too_long", "input is an estimated 11 tokens; the limit is 10 tokens per input"
    )


@pytest.mark.parametrize(
    ("counts", "fmt", "expected"),
    [
        ([10, 10, 5], "float", []),
        ([], "float", ["batch is empty"]),
        ([1, 1, 1, 1], "float", ["4 inputs > max_inputs 3"]),
        ([10, 10, 6], "float", ["26 tokens > max_tokens_per_request 25"]),
        ([1, 11], "float", ["input 1: 11 tokens > max_tokens_per_input 10"]),
        ([1], "base64", ["encoding_format 'base64' not allowed"]),
        (
            [11, 11, 11, 1],
            "base64",
            [
                "4 inputs > max_inputs 3",
                "34 tokens > max_tokens_per_request 25",
                "input 0: 11 tokens > max_tokens_per_input 10",
                "input 1: 11 tokens > max_tokens_per_input 10",
                "input 2: 11 tokens > max_tokens_per_input 10",
                "encoding_format 'base64' not allowed",
            ],
        ),
    ],
)
def test_batch_violations(counts: list[int], fmt: str, expected: list[str]) -> None:
    assert batch_violations(SMALL, counts, fmt) == expected


@given(st.lists(st.integers(min_value=0, max_value=12), max_size=6))
def test_batch_violations_agree_with_each_limit(counts: list[int]) -> None:
    within = (
        0 < len(counts) <= SMALL.max_inputs
        and sum(counts) <= SMALL.max_tokens_per_request
        and all(c <= SMALL.max_tokens_per_input for c in counts)
    )
    assert (batch_violations(SMALL, counts, "float") == []) == within


@pytest.mark.parametrize(
    ("batch", "slots", "max_bytes", "item_bytes", "expected"),
    [
        (256, 4, 64 * 2**20, 1024, 5_000),  # the library defaults: as today
        (2048, 8, 64 * 2**20, 1024, 32_768),  # the case: two full calls per slot
        (2048, 8, 16 * 2**20, 1024, 16_384),  # the byte bound wins
        (2048, 8, 1 * 2**20, 1024, 2048),  # ... but never under one batch
        (32, 1, 64 * 2**20, 1024, 5_000),
    ],
)
def test_the_buffers_item_bound_fills_the_asked_batches(
    batch: int, slots: int, max_bytes: int, item_bytes: int, expected: int
) -> None:
    assert buffered_items_bound(batch, slots, max_bytes, item_bytes) == expected
