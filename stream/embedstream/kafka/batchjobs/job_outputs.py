"""A job's output and error files, downloaded to disk and looked up by custom id.

A line of either file is ``{"custom_id", "response": {"status_code", "body"} | null,
"error": {"code", "message"} | null}``: answered 200 (its body an embeddings answer), answered
with an error status (the sync call's error body), or not answered at all (``batch_expired``,
``batch_cancelled``). Only each line's place in its file is kept in memory; a line is read and
parsed when its input's outcome is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LineAnswer:
    status: int | None  # None: not answered (the error's code says why)
    body: Any
    error_code: str | None = None
    message: str = ""

    @property
    def answered(self) -> bool:
        return self.status is not None


class JobOutputs:
    """The lines of a job's files, by custom id; the files are deleted on `close`."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="embedstream-batch-"))
        self._files: list[Path] = []
        self._places: dict[str, tuple[int, int, int]] = {}  # custom id -> file, start, length
        self.tokens = 0  # reported by the answered lines

    def new_file(self, name: str) -> Path:
        path = self._dir / name
        self._files.append(path)
        return path

    def index(self, path: Path) -> int:
        """Learn where each line of a downloaded file is; how many lines it has."""
        number = self._files.index(path)
        lines = 0
        with path.open("rb") as file:
            start = 0
            for raw in file:
                length = len(raw)
                custom_id = _custom_id(raw)
                if custom_id is not None:
                    self._places[custom_id] = (number, start, length)
                    lines += 1
                start += length
        return lines

    def __len__(self) -> int:
        return len(self._places)

    def get(self, custom_id: str) -> LineAnswer | None:
        place = self._places.get(custom_id)
        if place is None:
            return None
        number, start, length = place
        with self._files[number].open("rb") as file:
            file.seek(start)
            raw = file.read(length)
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return LineAnswer(None, None, "unreadable_line", "the output line is not JSON")
        response = doc.get("response") if isinstance(doc, dict) else None
        if isinstance(response, dict) and isinstance(response.get("status_code"), int):
            return LineAnswer(response["status_code"], response.get("body"))
        error = doc.get("error") if isinstance(doc, dict) else None
        error = error if isinstance(error, dict) else {}
        return LineAnswer(None, None, str(error.get("code") or "unanswered"),
                          str(error.get("message") or ""))  # fmt: skip

    def close(self) -> None:
        for path in self._files:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not delete %s (%s)", path, exc)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)


# OpenAI writes a line's custom id near its start: found there without parsing the vector.
_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"([^"\\]*)"')


def _custom_id(raw: bytes) -> str | None:
    if not raw.strip():
        return None
    found = _CUSTOM_ID.search(raw, 0, 512)
    if found is not None:
        return found.group(1).decode("utf-8", "replace")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    found = doc.get("custom_id") if isinstance(doc, dict) else None
    return found if isinstance(found, str) else None
