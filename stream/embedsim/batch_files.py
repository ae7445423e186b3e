"""The simulator's ``/v1/files``: uploaded and generated files, held in memory. Pure: times
come in as arguments, ids from an injected random source.

A file is OpenAI's ``FileObject`` (``id``, ``bytes``, ``created_at``, ``filename``,
``purpose``, ``status``, ``expires_at``); files of the Batch API (``batch`` in,
``batch_output`` out) expire after 30 days, as OpenAI's do by default.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from embedsim.errors import ApiError, invalid_request

PURPOSES = frozenset(
    {"assistants", "batch", "fine-tune", "vision", "user_data", "evals", "batch_output"}
)
UPLOADABLE = PURPOSES - {"batch_output"}  # written by the API itself
BATCH_FILE_TTL_S = 30 * 86_400


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str
    filename: str
    purpose: str
    created_at: float
    content: bytes

    def to_json(self) -> dict[str, object]:
        expires = None
        if self.purpose in ("batch", "batch_output"):
            expires = int(self.created_at + BATCH_FILE_TTL_S)
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": int(self.created_at),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": expires,
            "status_details": None,
        }


def no_such_file(file_id: str) -> ApiError:
    return ApiError(
        404, f"No such File object: {file_id}", error_type="invalid_request_error", param="id"
    )


class FileStore:
    def __init__(self, ids: random.Random) -> None:
        self._ids = ids
        self._files: dict[str, StoredFile] = {}

    def __len__(self) -> int:
        return len(self._files)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{self._ids.getrandbits(96):024x}"

    def upload(self, filename: str, purpose: str, content: bytes, now: float) -> StoredFile:
        """A file a client uploads, refused as OpenAI refuses it."""
        if purpose not in UPLOADABLE:
            raise invalid_request(
                f"Invalid value for 'purpose': {purpose!r}.", param="purpose", code="invalid_value"
            )
        if purpose == "batch" and not filename.endswith(".jsonl"):
            raise invalid_request(
                "Invalid file format for Batch API. Must be .jsonl", param=None, code=None
            )
        return self.add(filename, purpose, content, now)

    def add(self, filename: str, purpose: str, content: bytes, now: float) -> StoredFile:
        stored = StoredFile(self.new_id("file-"), filename, purpose, now, content)
        self._files[stored.id] = stored
        return stored

    def get(self, file_id: str) -> StoredFile:
        found = self._files.get(file_id)
        if found is None:
            raise no_such_file(file_id)
        return found

    def delete(self, file_id: str) -> dict[str, object]:
        self.get(file_id)
        del self._files[file_id]
        return {"id": file_id, "object": "file", "deleted": True}

    def listed(self, purpose: str | None) -> dict[str, object]:
        """OpenAI's list of files, newest first."""
        found = [f for f in self._files.values() if purpose is None or f.purpose == purpose]
        found.sort(key=lambda f: f.created_at, reverse=True)
        data = [f.to_json() for f in found]
        return {"object": "list", "data": data, "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}  # fmt: skip
