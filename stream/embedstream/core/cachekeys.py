"""What a cached vector is filed under: a digest of everything that determines the vector.

The provider (its base URL, or the profile when none is set), every field of the bucket key
except the priority lane and the encoding format (a vector is stored as float32 and served in
either encoding), and the exact text (or token ids). Fields are read from :class:`BucketKey`
itself, so a field added to the bucket key later (a request option that changes the vector) is
part of the cache key without anyone remembering to add it. Each part is tagged with its type
and prefixed with its length, so no two different requests can produce the same bytes to
digest. Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

import orjson

from embedstream.core.lanes import BucketKey
from embedstream.wire.openai import Input

# Bumped whenever what is digested, or how vectors are stored, changes: old entries then simply
# stop matching (and expire), instead of being misread.
KEY_VERSION = 1
KEY_PREFIX = f"embedstream:v{KEY_VERSION}:"
# Bucket-key fields that never change the vector: which lane it waited in, how it is encoded.
NOT_IN_KEY = frozenset({"priority", "encoding_format"})
_PERSON = b"embedstream-vec"  # blake2b personalisation: digests of other uses never coincide


def provider_identity(
    base_url: str | None, profile: str, options: Mapping[str, object] | None = None
) -> str:
    """The endpoint a vector came from: the base URL without credentials, trailing slash or
    case differences in scheme and host; without a base URL, the provider profile's default.
    ``options`` (the extra_body every request carries, e.g. vLLM's truncate_prompt_tokens)
    may change vectors, so they are part of it."""
    suffix = (
        "" if not options else " " + orjson.dumps(options, option=orjson.OPT_SORT_KEYS).decode()
    )
    if not base_url:
        return f"default:{profile}{suffix}"
    parts = urlsplit(base_url.strip())
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), netloc.lower(), path, parts.query, "")) + suffix


def key_parts(provider: str, key: BucketKey, text: Input) -> list[bytes]:
    """The tagged parts digested for one request, in a fixed order (exposed for tests)."""
    parts = [_tagged("provider", provider)]
    for name, value in zip(key._fields, key, strict=True):
        if name not in NOT_IN_KEY:
            parts.append(_tagged(name, value))
    parts.append(_tagged("text", text))
    return parts


def cache_key(provider: str, key: BucketKey, text: Input) -> str:
    """The cache key of one request: prefix + hex blake2b-256 of its length-prefixed parts."""
    digest = hashlib.blake2b(digest_size=32, person=_PERSON)
    for part in key_parts(provider, key, text):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return KEY_PREFIX + digest.hexdigest()


# Buckets whose digested parts are kept (a processor sees a handful: lanes x models).
_KEPT_BUCKETS = 256


class CacheKeys:
    """:func:`cache_key` for one provider, with each bucket's parts digested once: per text,
    only the text is hashed on (a copy of the bucket's digest state). The same keys, at a
    fraction of the work on the hot path."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._prefixes: dict[BucketKey, hashlib.blake2b] = {}

    def of(self, key: BucketKey, text: Input) -> str:
        prefix = self._prefixes.get(key)
        if prefix is None:
            if len(self._prefixes) >= _KEPT_BUCKETS:
                self._prefixes.clear()
            prefix = hashlib.blake2b(digest_size=32, person=_PERSON)
            for part in key_parts(self._provider, key, text)[:-1]:
                prefix.update(len(part).to_bytes(8, "big"))
                prefix.update(part)
            self._prefixes[key] = prefix
        digest = prefix.copy()
        part = _tagged("text", text)
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
        return KEY_PREFIX + digest.hexdigest()


def _tagged(name: str, value: object) -> bytes:
    """`name` and `value` with the value's type, so None, "", 0 and "0" all differ."""
    if value is None:
        kind, body = "none", b""
    elif isinstance(value, bool):  # before int: True is an int too
        kind, body = "bool", b"1" if value else b"0"
    elif isinstance(value, int):
        kind, body = "int", str(value).encode()
    elif isinstance(value, str):
        kind, body = "str", value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        kind, body = "bytes", value
    elif isinstance(value, float):
        kind, body = "float", value.hex().encode()
    elif isinstance(value, tuple):  # token ids: never equal to any text
        kind, body = "ids", ",".join(map(str, value)).encode()
    else:  # a field type not foreseen: its repr still tells distinct values apart
        kind, body = type(value).__qualname__, repr(value).encode("utf-8", "surrogatepass")
    head = f"{name}\x00{kind}\x00".encode()
    return len(head).to_bytes(4, "big") + head + body
