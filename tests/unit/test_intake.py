from __future__ import annotations

import orjson
import pytest
from embedstream.core import configured
from embedstream.core.intake import Admitted, AdmittedDocument, Intake, Rejected, truncate
from embedstream.core.tokens import estimate_tokens
from embedstream.errors import ConfigError
from embedstream.settings import load_settings


def intake(**overrides: object) -> Intake:
    settings = load_settings(env={}, overrides=overrides)
    return Intake(settings, configured.provider_limits(settings), estimate_tokens)


AZURE = {"provider_profile": "azure", "azure_endpoint": "https://r.openai.azure.com",
         "api_key": "k"}  # fmt: skip


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
        (doc(user="u1"), {"provider_profile": "ollama"}, "PermanentItemError",
         "unsupported_parameter"),
        (doc(input_type="query"), {}, "PermanentItemError", "unsupported_parameter"),
        (doc(task="retrieval.query"), AZURE, "PermanentItemError", "unsupported_parameter"),
        (doc(dimensions=64), {**AZURE, "azure_api_version": "2023-05-15"}, "PermanentItemError",
         "unsupported_dimensions"),
        (doc(user=5), {}, "InvalidEvent", "invalid_user"),
        (doc(input_type=""), {}, "InvalidEvent", "invalid_input_type"),
        (doc(task="t" * 513), {}, "InvalidEvent", "invalid_task"),
    ],
)  # fmt: skip
def test_rejections_carry_class_and_reason(
    value: bytes, overrides: dict[str, object], error_class: str, reason: str
) -> None:
    verdict = intake(**overrides).admit(value)
    assert isinstance(verdict, Rejected)
    assert (verdict.error_class, verdict.reason) == (error_class, reason)
    assert verdict.message


def test_the_dimensions_refusal_names_the_azure_api_version() -> None:
    verdict = intake(**AZURE, azure_api_version="2023-05-15").admit(doc(dimensions=64))
    assert isinstance(verdict, Rejected)
    assert "azure (api-version 2023-05-15) takes no `dimensions`" in verdict.message


def test_provider_fields_the_profile_takes_are_admitted() -> None:
    fields = {"user": "u1", "input_type": "query", "task": "retrieval.query"}
    verdict = intake(provider_profile="generic").admit(doc(**fields, dimensions=8))
    assert isinstance(verdict, Admitted)
    request = verdict.request
    assert (request.user, request.input_type, request.task) == ("u1", "query", "retrieval.query")
    assert request.parameters() == ("user", "input_type", "task")


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


def test_the_dimensions_setting_is_asked_when_a_request_or_document_names_none() -> None:
    sized = intake(dimensions=256)
    plain = sized.admit(doc())
    named = sized.admit(doc(dimensions=64))
    document = sized.admit(orjson.dumps({"doc_id": "d", "text": "some text"}))
    assert isinstance(plain, Admitted) and plain.request.dimensions == 256
    assert isinstance(named, Admitted) and named.request.dimensions == 64
    assert isinstance(document, AdmittedDocument) and document.event.dimensions == 256
    unset = intake().admit(doc())
    assert isinstance(unset, Admitted) and unset.request.dimensions is None


def test_the_dimensions_setting_with_a_profile_that_takes_none_fails_at_start() -> None:
    with pytest.raises(ConfigError) as caught:
        intake(dimensions=256, **AZURE, azure_api_version="2023-05-15")
    assert caught.value.setting == "dimensions"
