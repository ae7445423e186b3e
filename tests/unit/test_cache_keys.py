"""The cache key: everything that determines the vector is in it, nothing else is."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
from embedstream.core import configured
from embedstream.core.cachekeys import (
    KEY_PREFIX,
    NOT_IN_KEY,
    CacheKeys,
    cache_key,
    key_parts,
    provider_identity,
)
from embedstream.core.lanes import BucketKey, Priority
from embedstream.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

BASE = BucketKey(Priority.LOW, "text-embedding-3-small", "float", 256)
PROVIDER = "https://api.example/v1"


def test_a_key_is_the_prefix_and_a_256_bit_hex_digest() -> None:
    key = cache_key(PROVIDER, BASE, "hello")
    assert key.startswith(KEY_PREFIX)
    assert len(key) == len(KEY_PREFIX) + 64
    int(key.removeprefix(KEY_PREFIX), 16)


@pytest.mark.parametrize(
    ("what", "provider", "key", "text"),
    [
        ("another provider", "https://other.example/v1", BASE, "hello"),
        ("another model", PROVIDER, BASE._replace(model="text-embedding-3-large"), "hello"),
        ("other dimensions", PROVIDER, BASE._replace(dimensions=512), "hello"),
        ("the model's own dimensions", PROVIDER, BASE._replace(dimensions=None), "hello"),
        ("another text", PROVIDER, BASE, "hello!"),
        ("a trailing space", PROVIDER, BASE, "hello "),
        ("another case", PROVIDER, BASE, "Hello"),
        ("unicode normalisation", PROVIDER, BASE, "he\u0301llo"),
    ],
)
def test_whatever_changes_the_vector_changes_the_key(
    what: str, provider: str, key: BucketKey, text: str
) -> None:
    assert cache_key(provider, key, text) != cache_key(PROVIDER, BASE, "hello"), what


@pytest.mark.parametrize(
    "key",
    [BASE._replace(priority=Priority.HIGH), BASE._replace(encoding_format="base64")],
    ids=["lane", "encoding"],
)
def test_the_lane_and_the_encoding_do_not_change_the_key(key: BucketKey) -> None:
    assert cache_key(PROVIDER, key, "hello") == cache_key(PROVIDER, BASE, "hello")


class WiderKey(NamedTuple):
    """A bucket key as another change may extend it: a provider-specific request field."""

    priority: Priority
    model: str
    encoding_format: str
    dimensions: int | None
    input_type: str | None


def test_a_field_added_to_the_bucket_key_is_in_the_cache_key_without_more_code() -> None:
    query = WiderKey(Priority.LOW, "m", "float", None, "query")
    document = query._replace(input_type="document")
    wider: Any = query  # cache_key reads any bucket key's fields
    other: Any = document
    assert cache_key(PROVIDER, wider, "t") != cache_key(PROVIDER, other, "t")
    assert set(BucketKey._fields) >= NOT_IN_KEY


@pytest.mark.parametrize(
    ("left", "right"),
    [
        # Concatenation without length prefixes would make these two identical.
        ((PROVIDER, BASE._replace(model="ab"), "c"), (PROVIDER, BASE._replace(model="a"), "bc")),
        (("https://h/v1a", BASE, "b"), ("https://h/v1", BASE, "ab")),
        # None, 0 and "0" are different values.
        ((PROVIDER, BASE._replace(dimensions=None), "x"),
         (PROVIDER, BASE._replace(dimensions=0), "x")),
        ((PROVIDER, BASE._replace(model="1"), "x"), (PROVIDER, BASE._replace(model=1), "x")),  # type: ignore[arg-type]
    ],
)  # fmt: skip
def test_no_two_different_requests_share_a_key(
    left: tuple[str, BucketKey, str], right: tuple[str, BucketKey, str]
) -> None:
    assert key_parts(*left) != key_parts(*right)
    assert cache_key(*left) != cache_key(*right)


requests = st.tuples(
    st.sampled_from(["https://a/v1", "https://b/v1", "default:openai", ""]),
    st.text(max_size=8),
    st.one_of(st.none(), st.integers(min_value=0, max_value=4096)),
    st.text(max_size=40),
)


def _framed(parts: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(8, "big") + p for p in parts)


@given(requests, requests)
def test_distinct_requests_never_digest_the_same_bytes(
    left: tuple[str, str, int | None, str], right: tuple[str, str, int | None, str]
) -> None:
    def framed(request: tuple[str, str, int | None, str]) -> bytes:
        provider, model, dimensions, text = request
        key = BucketKey(Priority.HIGH, model, "float", dimensions)
        return _framed(key_parts(provider, key, text))

    # What is digested is injective, so equal digests could only be a blake2b collision.
    assert (framed(left) == framed(right)) == (left == right)
    if left != right:
        provider, model, dimensions, text = left
        other = right
        assert cache_key(provider, BucketKey(Priority.LOW, model, "float", dimensions), text) != (
            cache_key(other[0], BucketKey(Priority.LOW, other[1], "float", other[2]), other[3])
        )


@pytest.mark.parametrize(
    ("base_url", "profile", "identity"),
    [
        (None, "openai", "default:openai"),
        (None, "dashscope", "default:dashscope"),
        ("https://api.openai.com/v1", "openai", "https://api.openai.com/v1"),
        ("https://api.openai.com/v1/", "openai", "https://api.openai.com/v1"),
        ("HTTPS://API.OpenAI.com/v1", "openai", "https://api.openai.com/v1"),
        ("https://user:secret@gateway:8443/v1", "openai", "https://gateway:8443/v1"),
        ("http://127.0.0.1:8700/v1", "generic", "http://127.0.0.1:8700/v1"),
    ],
)
def test_provider_identity(base_url: str | None, profile: str, identity: str) -> None:
    assert provider_identity(base_url, profile) == identity


def test_a_different_port_or_path_is_a_different_provider() -> None:
    assert provider_identity("http://h:1/v1", "openai") != provider_identity(
        "http://h:2/v1", "openai"
    )
    assert provider_identity("http://h/a/v1", "openai") != provider_identity(
        "http://h/b/v1", "openai"
    )


def test_request_options_every_call_carries_are_part_of_the_provider() -> None:
    plain = provider_identity("http://vllm/v1", "vllm")
    truncated = provider_identity("http://vllm/v1", "vllm", {"truncate_prompt_tokens": 256})
    assert plain != truncated
    # The same options in another order are the same provider.
    assert provider_identity("http://h/v1", "vllm", {"a": 1, "b": 2}) == provider_identity(
        "http://h/v1", "vllm", {"b": 2, "a": 1}
    )


def test_each_azure_resource_and_deployment_is_its_own_provider() -> None:
    def identity(**values: str) -> str:
        settings = load_settings(
            env={}, overrides={"provider_profile": "azure", "api_key": "k", **values}
        )
        return provider_identity(configured.provider_endpoint(settings), "azure")

    one = identity(azure_endpoint="https://one.openai.azure.com", azure_deployment="small")
    assert one == "https://one.openai.azure.com/openai/deployments/small"
    assert one != identity(azure_endpoint="https://two.openai.azure.com", azure_deployment="small")
    assert one != identity(azure_endpoint="https://one.openai.azure.com", azure_deployment="large")
    # Without a deployment the model names it, and the model is in every cache key.
    assert identity(azure_endpoint="https://one.openai.azure.com/") == (
        "https://one.openai.azure.com/openai"
    )


def test_token_ids_never_share_a_key_with_a_text() -> None:
    key = BucketKey(Priority.ONLINE, "m", "float", None)
    ids = cache_key("p", key, (1, 2, 3))
    assert ids == cache_key("p", key, (1, 2, 3))
    assert ids not in {cache_key("p", key, t) for t in ("1,2,3", "(1, 2, 3)", "[1, 2, 3]")}
    assert ids != cache_key("p", key, (1, 2))


@given(
    texts=st.lists(st.one_of(st.text(), st.tuples(st.integers(0, 99))), min_size=1, max_size=20),
    dims=st.sampled_from([None, 8, 256]),
    model=st.sampled_from(["m1", "m2"]),
)
def test_the_kept_bucket_digests_give_the_same_keys(
    texts: list[str | tuple[int, ...]], dims: int | None, model: str
) -> None:
    keys = CacheKeys(PROVIDER)
    for text in texts:
        bucket = BucketKey(Priority.LOW, model, "float", dims)
        assert keys.of(bucket, text) == cache_key(PROVIDER, bucket, text)
