"""Who a caller is: its bearer key looked up among the configured keys, which rotate without a
restart when they come from a file (read again whenever the file changes)."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from embedstream.errors import ConfigError
from embedstream.settings import caller_keys

log = logging.getLogger(__name__)

ANONYMOUS = "anonymous"  # the name callers go by when no key is asked (loopback only)
RECHECK_S = 1.0  # the key file is looked at no more often than this


class CallerKeys:
    """`keys`: {key: name}. With `file`, the keys are the file's, read again when its size or
    modification time changes; a file that no longer parses keeps the keys it had."""

    def __init__(
        self,
        keys: Mapping[str, str],
        *,
        file: Path | None = None,
        clock: Callable[[], float],
    ) -> None:
        self._by_digest = _digests(keys)
        self._file = file
        self._clock = clock
        self._checked_at = clock()
        self._stamp = _stamp(file) if file is not None else None

    @property
    def names(self) -> list[str]:
        """The callers' names (`anonymous` when no key is asked)."""
        return sorted(set(self._by_digest.values())) or [ANONYMOUS]

    @property
    def required(self) -> bool:
        """Callers must present a key (some are configured)."""
        return bool(self._by_digest)

    def name_of(self, authorization: str | None) -> str | None:
        """The name of the caller presenting ``Authorization: Bearer <key>``, or None when
        the key is missing or unknown. Anyone is `anonymous` when no keys are configured."""
        self._reload_if_changed()
        if not self._by_digest:
            return ANONYMOUS
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        # Looked up by digest: a dict probe on the key itself would leak, through timing, how
        # much of a guess matches a real key's hash bucket; a digest's bucket says nothing.
        return self._by_digest.get(_digest(key.strip()))

    def _reload_if_changed(self) -> None:
        if self._file is None:
            return
        now = self._clock()
        if now - self._checked_at < RECHECK_S:
            return
        self._checked_at = now
        stamp = _stamp(self._file)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            text = self._file.read_text(encoding="utf-8")
            keys = caller_keys(text, "http_api_keys_file")
        except (OSError, UnicodeDecodeError, ConfigError) as exc:
            log.error("keeping the callers' keys: %s cannot be used now (%s)", self._file, exc)
            return
        self._by_digest = _digests(keys)
        log.info("callers' keys read again from %s: %d keys", self._file, len(keys))


def _digests(keys: Mapping[str, str]) -> dict[bytes, str]:
    return {_digest(key): name for key, name in keys.items()}


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size
