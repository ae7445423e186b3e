"""A batch's input as OpenAI checks it: its metadata when it is created, its JSONL file when it
is validated (one embeddings request a line, one model, unique custom ids, a limit on inputs).
Pure."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from embedsim.errors import invalid_request

# What OpenAI allows as a batch's metadata.
METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
MAX_VALIDATION_ERRORS = 10


def check_metadata(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > METADATA_KEYS:
        raise invalid_request(
            f"Invalid 'metadata': expected an object of at most {METADATA_KEYS} pairs.",
            param="metadata", code="invalid_type",
        )  # fmt: skip
    for key, text in value.items():
        if not isinstance(text, str) or len(key) > METADATA_KEY_CHARS:
            raise invalid_request(f"Invalid 'metadata.{key[:64]}': keys of at most "
                                  f"{METADATA_KEY_CHARS} characters, string values.",
                                  param="metadata", code="invalid_value")  # fmt: skip
        if len(text) > METADATA_VALUE_CHARS:
            raise invalid_request(
                f"Invalid 'metadata.{key}': string too long ({len(text)} > "
                f"{METADATA_VALUE_CHARS}).", param="metadata", code="string_above_max_length",
            )  # fmt: skip
    return dict(value)


def error_entry(
    code: str, message: str, line: int | None = None, param: str | None = None
) -> dict[str, object]:
    return {"code": code, "message": message, "param": param, "line": line}


def inputs_of(body: Mapping[str, object]) -> list[str]:
    """The texts of a line's body, for counting (token ids count as one text)."""
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        if value and all(isinstance(i, int) for i in value):
            return ["ids"]
        return [i if isinstance(i, str) else "ids" for i in value]
    return []


def parse_lines(
    content: bytes, endpoint: str, max_inputs: int
) -> tuple[list[tuple[str, dict[str, object]]], str | None, list[dict[str, object]]]:
    """The file's lines (custom id, body), their model, and what is wrong with the file."""
    errors: list[dict[str, object]] = []
    lines: list[tuple[str, dict[str, object]]] = []
    seen: set[str] = set()
    model: str | None = None
    inputs = 0
    rows = [row for row in content.split(b"\n") if row.strip()]
    if not rows:
        return [], None, [error_entry("empty_file", "The input file is empty.")]
    for number, row in enumerate(rows, start=1):
        if len(errors) >= MAX_VALIDATION_ERRORS:
            break
        try:
            doc = orjson.loads(row)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            errors.append(error_entry("invalid_json_line",
                                 "This line is not parseable as valid JSON.", number))  # fmt: skip
            continue
        custom_id, body = doc.get("custom_id"), doc.get("body")
        if not isinstance(custom_id, str) or not custom_id:
            errors.append(error_entry("missing_required_parameter", "Missing 'custom_id'.", number,
                                 "custom_id"))  # fmt: skip
        elif custom_id in seen:
            errors.append(error_entry("duplicate_custom_id", "The custom_id for this request is a "
                                 "duplicate of another request.", number, "custom_id"))  # fmt: skip
        elif doc.get("method") != "POST":
            errors.append(
                error_entry("invalid_value", "'method' must be 'POST'.", number, "method")
            )
        elif doc.get("url") != endpoint:
            errors.append(error_entry("url_mismatch", f"The provided url {doc.get('url')!r} does "
                                 f"not match the batch endpoint {endpoint!r}.", number,
                                 "url"))  # fmt: skip
        elif not isinstance(body, dict):
            errors.append(error_entry("invalid_value", "'body' must be an object.", number, "body"))
        else:
            line_model = body.get("model")
            if model is None and isinstance(line_model, str):
                model = line_model
            if line_model != model:
                errors.append(error_entry("model_mismatch", "The provided model does not match the "
                                     "model of the other requests in the file.", number,
                                     "body.model"))  # fmt: skip
                continue
            seen.add(custom_id)
            inputs += len(inputs_of(body))
            lines.append((custom_id, body))
    if inputs > max_inputs and not errors:
        errors.append(error_entry("too_many_tasks", f"The batch holds {inputs:,} embedding inputs; "
                             f"the limit is {max_inputs:,} a batch."))  # fmt: skip
    return lines, model, errors
