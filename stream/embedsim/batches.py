"""The simulator's Batch API: a batch's life as OpenAI's, on the clock passed in. Pure.

A batch is created from an uploaded ``purpose=batch`` JSONL file, one embeddings request a line
(``custom_id``, ``method``, ``url``, ``body``). Its states follow its creation time and the
times the configuration gave it then:

- ``validating`` for ``batch_validating_s``; then the file is checked as OpenAI checks it
  (one model, unique ids, at most ``batch_max_requests`` inputs, the model's enqueued tokens
  within ``batch_enqueued_tokens``): ``failed`` with ``errors``, or
- ``in_progress`` for ``batch_completion_s``, its lines done at an even pace, each answered as
  ``/v1/embeddings`` answers its body (a 400 line for a bad body or a rejected text, a 500 line
  at ``batch_line_error_rate``);
- ``finalizing`` for ``batch_finalizing_s``, then ``completed`` with an output file (the lines
  answered 200) and an error file (the others);
- still not finalizing ``batch_window_s`` after its creation: ``expired``, its done lines in the
  output file and the rest in the error file as ``batch_expired``;
- cancelled while validating or in progress: ``cancelling`` for ``batch_cancelling_s``, then
  ``cancelled`` with what it did by the cancel (the rest as ``batch_cancelled``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from embedsim.batch_files import FileStore
from embedsim.batch_input import check_metadata, error_entry, inputs_of, parse_lines
from embedsim.config import SimulatorConfig
from embedsim.errors import ApiError, invalid_request, server_error
from embedsim.protocol import EmbeddingRequest, build_response, check_rejected_texts
from embedsim.protocol import validate_request as validate_body
from embedsim.vectors import count_tokens

ENDPOINTS = frozenset({"/v1/embeddings"})
WINDOWS = frozenset({"24h"})
TERMINAL = frozenset({"completed", "expired", "failed", "cancelled"})
MAX_LISTED = 100

Vectors = Callable[[EmbeddingRequest], Sequence[list[float]] | None]


@dataclass(frozen=True, slots=True)
class Timing:
    """The configuration's times, taken when the batch was created."""

    validating_s: float
    completion_s: float
    finalizing_s: float
    cancelling_s: float
    window_s: float

    @classmethod
    def of(cls, config: SimulatorConfig) -> Timing:
        return cls(config.batch_validating_s, config.batch_completion_s,
                   config.batch_finalizing_s, config.batch_cancelling_s,
                   config.batch_window_s)  # fmt: skip


@dataclass(slots=True)
class Line:
    """One input line once validated: its answer (a request to embed, or an error)."""

    custom_id: str
    request: EmbeddingRequest | None
    error: ApiError | None


def no_such_batch(batch_id: str) -> ApiError:
    return ApiError(404, f"No batch found with id '{batch_id}'.",
                    error_type="invalid_request_error", param="batch_id")  # fmt: skip


@dataclass(slots=True)
class SimBatch:
    id: str
    input_file_id: str
    endpoint: str
    metadata: dict[str, str] | None
    created_at: float
    timing: Timing
    model: str | None = None
    tokens: int = 0  # estimated, what counts against the enqueued limit
    lines: list[Line] = field(default_factory=list)
    status: str = "validating"
    errors: list[dict[str, object]] | None = None
    times: dict[str, float] = field(default_factory=dict)  # in_progress_at, ...
    cancel_at: float | None = None
    done: int = 0  # lines done (in input order)
    output_file_id: str | None = None
    error_file_id: str | None = None
    usage_tokens: int = 0

    @property
    def expires_at(self) -> float:
        return self.created_at + self.timing.window_s

    def enqueued_during(self) -> tuple[float, float] | None:
        """When its tokens count against its model's enqueued limit: while in progress or
        finalizing."""
        start = self.times.get("in_progress_at")
        if start is None:
            return None
        ends = [self.times[k] for k in ("completed_at", "cancelling_at", "expired_at")
                if k in self.times]  # fmt: skip
        planned = start + self.timing.completion_s + self.timing.finalizing_s
        return start, min(ends) if ends else min(planned, self.expires_at)

    def counts(self) -> dict[str, int]:
        failed = sum(1 for line in self.lines[: self.done] if line.request is None)
        return {"total": len(self.lines), "completed": self.done - failed, "failed": failed}

    def to_json(self) -> dict[str, object]:
        t = self.times
        seconds = {k: (int(t[k]) if k in t else None) for k in (
            "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
            "cancelling_at", "cancelled_at")}  # fmt: skip
        errors = None if self.errors is None else {"object": "list", "data": self.errors}
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": errors,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created_at),
            "expires_at": int(self.expires_at),
            **seconds,
            "request_counts": self.counts(),
            "metadata": self.metadata,
            "model": self.model,
            "usage": {
                "input_tokens": self.usage_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 0,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.usage_tokens,
            },
        }


class BatchBook:
    """Every batch of one simulator, advanced to ``now`` before each answer."""

    def __init__(
        self,
        files: FileStore,
        rng: random.Random,
        vectors: Vectors,
        served: Callable[[int, int], None] = lambda inputs, tokens: None,
    ) -> None:
        """``rng`` rolls the failing lines; ``vectors`` gives a request's vectors (None: the
        hash vectors); ``served`` counts each finished batch's inputs and tokens answered."""
        self.files = files
        self._rng = rng
        self._vectors = vectors
        self._served = served
        self._batches: dict[str, SimBatch] = {}  # in creation order

    def __len__(self) -> int:
        return len(self._batches)

    def create(self, body: Mapping[str, object], config: SimulatorConfig, now: float) -> SimBatch:
        endpoint, window = body.get("endpoint"), body.get("completion_window")
        if endpoint not in ENDPOINTS:
            raise invalid_request(f"Invalid value for 'endpoint': {endpoint!r}; this server "
                                  "batches /v1/embeddings.", param="endpoint",
                                  code="invalid_value")  # fmt: skip
        if window not in WINDOWS:
            raise invalid_request(f"Invalid value for 'completion_window': {window!r}; "
                                  "supported: '24h'.", param="completion_window",
                                  code="invalid_value")  # fmt: skip
        file_id = body.get("input_file_id")
        if not isinstance(file_id, str):
            raise invalid_request("Missing 'input_file_id'.", param="input_file_id",
                                  code="missing_required_parameter")  # fmt: skip
        try:
            source = self.files.get(file_id)
        except ApiError:
            raise invalid_request(f"Cannot find file {file_id}, or it is not accessible.",
                                  param="input_file_id", code=None) from None  # fmt: skip
        if source.purpose != "batch":
            raise invalid_request(f"File {file_id} was not uploaded with purpose 'batch'.",
                                  param="input_file_id", code="invalid_value")  # fmt: skip
        if len(source.content) > config.batch_max_bytes:
            raise invalid_request("File is too large.", param=None, code=None)
        metadata = check_metadata(body.get("metadata"))
        batch = SimBatch(self.files.new_id("batch_"), file_id, str(endpoint), metadata, now,
                         Timing.of(config))  # fmt: skip
        self._batches[batch.id] = batch
        return batch

    def get(self, batch_id: str, config: SimulatorConfig, now: float) -> SimBatch:
        self.advance(config, now)
        found = self._batches.get(batch_id)
        if found is None:
            raise no_such_batch(batch_id)
        return found

    def cancel(self, batch_id: str, config: SimulatorConfig, now: float) -> SimBatch:
        batch = self.get(batch_id, config, now)
        if batch.status not in ("validating", "in_progress"):
            raise ApiError(409, f"Cannot cancel a batch with status '{batch.status}'.",
                           error_type="invalid_request_error")  # fmt: skip
        batch.cancel_at = now
        self.advance(config, now)
        return batch

    def listed(
        self, after: str | None, limit: int, config: SimulatorConfig, now: float
    ) -> dict[str, object]:
        """OpenAI's cursor page of batches, newest first."""
        self.advance(config, now)
        newest_first = list(reversed(self._batches.values()))
        if after is not None:
            ids = [b.id for b in newest_first]
            newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
        page = newest_first[: max(1, min(limit, MAX_LISTED))]
        data = [b.to_json() for b in page]
        return {"object": "list", "data": data, "has_more": len(newest_first) > len(page),
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}  # fmt: skip

    def advance(self, config: SimulatorConfig, now: float) -> None:
        for batch in self._batches.values():  # in creation order: the enqueued limit's order
            if batch.status not in TERMINAL:
                self._advance(batch, config, now)

    def _advance(self, batch: SimBatch, config: SimulatorConfig, now: float) -> None:
        t, times = batch.timing, batch.times
        if "in_progress_at" not in times:
            validated = batch.created_at + t.validating_s
            stop = min(x for x in (batch.cancel_at, batch.expires_at) if x is not None)
            if stop <= validated and now >= stop:
                kind = "cancel" if stop == batch.cancel_at else "expire"
                return self._stop(batch, kind, stop, config, now)
            if now < validated:
                return
            self._validate(batch, config, validated)
            if batch.status == "failed":
                return
        start = times["in_progress_at"]
        batch.status = "in_progress"
        batch.done = self._done_by(batch, now)
        end = start + t.completion_s
        stops = [(x, kind) for x, kind in ((batch.cancel_at, "cancel"),
                 (batch.expires_at, "expire")) if x is not None and x < end]  # fmt: skip
        if stops:
            at, kind = min(stops)
            if now >= at:
                self._stop(batch, kind, at, config, now)
            return
        if now < end:
            return
        times["finalizing_at"] = end
        batch.done = len(batch.lines)
        batch.status = "finalizing"
        if now >= end + t.finalizing_s:
            times["completed_at"] = end + t.finalizing_s
            self._finish(batch, "completed", config)

    def _done_by(self, batch: SimBatch, at: float) -> int:
        start, n = batch.times["in_progress_at"], len(batch.lines)
        if batch.timing.completion_s <= 0:
            return n
        return max(0, min(n, math.floor((at - start) / batch.timing.completion_s * n + 1e-9)))

    def _stop(
        self, batch: SimBatch, kind: str, at: float, config: SimulatorConfig, now: float
    ) -> None:
        """Cancelled or expired at ``at``: what was done by then stays done."""
        if "in_progress_at" in batch.times:
            batch.done = self._done_by(batch, at)
        if kind == "expire":
            batch.times["expired_at"] = at
            return self._finish(batch, "expired", config)
        batch.times["cancelling_at"] = at
        batch.status = "cancelling"
        if now >= at + batch.timing.cancelling_s:
            batch.times["cancelled_at"] = at + batch.timing.cancelling_s
            self._finish(batch, "cancelled", config)

    def _validate(self, batch: SimBatch, config: SimulatorConfig, at: float) -> None:
        content = self.files.get(batch.input_file_id).content
        parsed, batch.model, errors = parse_lines(content, batch.endpoint,
                                                  config.batch_max_requests)  # fmt: skip
        batch.tokens = sum(count_tokens(text) for _, body in parsed for text in inputs_of(body))
        limit = config.batch_enqueued_tokens
        if not errors and limit and batch.model is not None:
            enqueued = self._enqueued(batch.model, at, batch)
            if enqueued + batch.tokens > limit:
                errors = [error_entry("token_limit_exceeded", f"Enqueued token limit reached for "
                                 f"{batch.model} in organization org-simulator. Limit: "
                                 f"{limit:,} enqueued tokens. Please try again once some "
                                 "in_progress batches have been completed.")]  # fmt: skip
        if errors:
            batch.errors, batch.status = errors, "failed"
            batch.times["failed_at"] = at
            return
        batch.lines = [self._line(custom_id, body, config) for custom_id, body in parsed]
        batch.times["in_progress_at"] = at
        batch.status = "in_progress"

    def _enqueued(self, model: str, at: float, asking: SimBatch) -> int:
        total = 0
        for other in self._batches.values():
            span = other.enqueued_during()
            if other is not asking and other.model == model and span and span[0] <= at < span[1]:
                total += other.tokens
        return total

    def _line(self, custom_id: str, body: Mapping[str, object], config: SimulatorConfig) -> Line:
        try:
            request = validate_body(body, config)
            check_rejected_texts(config, request)
            if config.batch_line_error_rate and self._rng.random() < config.batch_line_error_rate:
                raise server_error()
        except ApiError as error:
            return Line(custom_id, None, error)
        return Line(custom_id, request, None)

    def _finish(self, batch: SimBatch, status: str, config: SimulatorConfig) -> None:
        """The terminal state, with its output and error files."""
        batch.status = status
        out, failed, inputs = [], [], 0
        unanswered = {"expired": ("batch_expired", "This request could not be executed "
                                  "before the completion window expired."),
                      "cancelled": ("batch_cancelled", "This request was not executed: the "
                                    "batch was cancelled.")}  # fmt: skip
        for index, line in enumerate(batch.lines):
            entry: dict[str, object] = {"id": self.files.new_id("batch_req_"),
                                        "custom_id": line.custom_id}  # fmt: skip
            if index >= batch.done:
                code, message = unanswered[status]
                entry.update(response=None, error={"code": code, "message": message})
                failed.append(entry)
            elif line.request is not None:
                vectors = self._vectors(line.request)
                order = range(len(line.request.inputs))
                body = build_response(line.request, order, vectors)
                entry.update(response=self._response(200, body), error=None)
                batch.usage_tokens += line.request.total_tokens
                inputs += len(line.request.inputs)
                out.append(entry)
            else:
                assert line.error is not None
                entry.update(response=self._response(line.error.status, line.error.body()),
                             error=None)  # fmt: skip
                failed.append(entry)
        self._served(inputs, batch.usage_tokens)
        at = max(batch.times.values(), default=batch.created_at)
        if out:
            batch.output_file_id = self._write(f"{batch.id}_output.jsonl", out, at)
        if failed:
            batch.error_file_id = self._write(f"{batch.id}_error.jsonl", failed, at)

    def _response(self, status: int, body: object) -> dict[str, object]:
        return {"status_code": status, "request_id": self.files.new_id("req_"), "body": body}

    def _write(self, name: str, entries: list[dict[str, object]], at: float) -> str:
        content = b"".join(orjson.dumps(e) + b"\n" for e in entries)
        return self.files.add(name, "batch_output", content, at).id
