"""Secrets out of every log line: configured secrets and passwords inside URLs become ``***``.

The HTTP client, for one, logs each request's full URL, credentials included.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterable

# scheme://user:password@ -> scheme://user:***@
_URL_CREDENTIALS = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]*):[^/\s@]+@", re.I)
_MIN_SECRET = 4  # shorter "secrets" would mask ordinary words


class Redactor(logging.Filter):
    """Rewrites each record's message (and traceback) with secrets masked."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        # Longest first, so a secret containing another is masked whole.
        self._secrets = sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return _URL_CREDENTIALS.sub(r"\g<head>:***@", text)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.redact(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True
