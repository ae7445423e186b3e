from __future__ import annotations

import orjson
import pytest
from embedstream.config import load_settings
from embedstream.core.intake import Admitted, Intake, Rejected, truncate
from embedstream.core.limits import effective_limits, profile
from embedstream.core.tokens import estimate_tokens


def intake(**overrides: object) -> Intake:
    settings = load_settings(env={}, overrides=overrides)
    limits = effective_limits(
        profile(settings.provider_profile),
        max_batch_size=settings.max_batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        max_input_tokens=settings.max_input_tokens,
    )
    return Intake(settings, limits, estimate_tokens)


def doc(**fields: object) -> bytes:
    return orjson.dumps({"id": "a", "text": "hello", **fields})


def test_defaults_are_filled_in() -> None:
    verdict = intake(model="m0").admit(doc())
    assert isinstance(verdict, Admitted)
    assert (verdict.model, verdict.encoding_format, verdict.tokens) == ("m0", "float", 3)


@pytest.mark.parametrize(
    ("value", "overrides", "error_class", "reason"),
    [
        (b"nope", {}, "InvalidEvent", "invalid_json"),
        (doc(text=""), {}, "InvalidEvent", "empty_text"),
        (doc(text="x" * 30_000), {}, "PermanentItemError", "too_long"),
        (doc(model="other"), {"allowed_models": "m0,m1", "model": "m0"}, "PermanentItemError",
         "unknown_model"),
        (doc(encoding_format="base64"), {"provider_profile": "dashscope"}, "PermanentItemError",
         "unsupported_encoding_format"),
    ],
)  # fmt: skip
def test_rejections_carry_class_and_reason(
    value: bytes, overrides: dict[str, object], error_class: str, reason: str
) -> None:
    verdict = intake(**overrides).admit(value)
    assert isinstance(verdict, Rejected)
    assert (verdict.error_class, verdict.reason) == (error_class, reason)
    assert verdict.message


def test_truncate_policy_cuts_to_the_limit_and_remembers_the_original_size() -> None:
    long_text = "word " * 10_000
    verdict = intake(oversize_policy="truncate", max_input_tokens=100).admit(doc(text=long_text))
    assert isinstance(verdict, Admitted)
    assert verdict.truncated_from == estimate_tokens(long_text)
    assert verdict.tokens <= 100
    assert long_text.startswith(verdict.request.text)
    assert estimate_tokens(verdict.request.text + long_text[len(verdict.request.text)]) > 100


@pytest.mark.parametrize("limit", [1, 2, 5, 50])
def test_truncate_is_the_longest_fitting_prefix(limit: int) -> None:
    text = "héllo wörld " * 40
    cut = truncate(text, limit, estimate_tokens)
    assert estimate_tokens(cut) <= limit or cut == ""
    assert len(cut) == len(text) or estimate_tokens(text[: len(cut) + 1]) > limit
