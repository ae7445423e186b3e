"""How secrets look where they may be seen: URL passwords scrubbed, secret values masked.

Pure string rules, shared by `Settings.describe()`, error messages and the log redactor.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

CACHE_URL_SCHEMES = ("redis://", "rediss://", "unix://")


def scrub_url(text: str) -> str:
    """``http://user:pass@host/v1`` -> ``http://user:***@host/v1``; other text unchanged."""
    if "://" not in text or "@" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return "***"  # unparseable yet credential-shaped: show nothing
    if parts.password is None and "@" not in parts.netloc:
        return text
    user, _, host = parts.netloc.rpartition("@")
    user = user.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def url_password(text: str) -> str | None:
    """The password inside a URL, if it holds one."""
    if "://" not in text or "@" not in text:
        return None
    try:
        return urlsplit(text).password or None
    except ValueError:
        return None


def masked_secret(value: str) -> str:
    """A secret as logs show it: a secret URL keeps its scheme, host and path (who to ask),
    with any credentials replaced; anything else is entirely masked."""
    if not value.startswith(CACHE_URL_SCHEMES):
        return "***"
    try:
        parts = urlsplit(value)
    except ValueError:
        return "***"
    if "@" in parts.netloc:
        return f"{parts.scheme}://***@{parts.netloc.rpartition('@')[2]}{parts.path}"
    return value.split("?", 1)[0]  # a query may carry a password too
