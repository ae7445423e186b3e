"""The embedding backend's interface: one call (a bucket's texts) in, one outcome out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from embedstream.core.lanes import BucketKey
from embedstream.wire.openai import Input


@dataclass(frozen=True, slots=True)
class BatchCall:
    model: str
    texts: Sequence[Input]  # texts, or token ids where the provider takes them
    encoding_format: str
    dimensions: int | None
    # Provider-specific fields, one value for the whole call (a bucket never mixes them).
    user: str | None = None
    input_type: str | None = None
    task: str | None = None

    @classmethod
    def for_bucket(
        cls, key: BucketKey, texts: Sequence[Input], user: str | None = None
    ) -> BatchCall:
        """The call of a bucket's texts; ``user`` when the bucket key has none."""
        return cls(
            key.model, texts, key.encoding_format, key.dimensions,
            key.user or user, key.input_type, key.task,
        )  # fmt: skip

    def parameters(self) -> dict[str, str]:
        """The provider-specific fields this call sets, as request body fields."""
        fields = {"user": self.user, "input_type": self.input_type, "task": self.task}
        return {name: value for name, value in fields.items() if value is not None}


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    vectors: list[list[float] | str]  # in input order; base64 strings when asked for base64
    dimensions: int
    total_tokens: int
    latency_s: float
    headers: Mapping[str, str] = field(default_factory=dict)  # rate-limit hints for the gate


class EmbeddingBackend(Protocol):
    async def embed(self, call: BatchCall) -> BatchOutcome: ...

    async def close(self) -> None: ...
