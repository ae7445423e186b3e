"""Log setup: plain or JSON lines. Messages carry request ids at most, never texts or keys.

Every line also passes a :class:`Redactor`: secrets configured for this process and passwords
inside URLs (``http://user:pass@host``) are replaced by ``***`` whoever logs them; the HTTP
client, for one, logs each request's full URL.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterable

import orjson

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


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exception"] = record.exc_text
        return orjson.dumps(doc).decode()


def setup_logging(level: str, fmt: str, secrets: Iterable[str] = ()) -> None:
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(Redactor(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiokafka").setLevel(max(root.level, logging.WARNING))
