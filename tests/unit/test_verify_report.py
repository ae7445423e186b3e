"""Unit tests of the pure delivery report behind `embedstream verify`."""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from embedsim.model import encode_base64, expected_vector
from embedstream.tools.verify.report import (
    DeadLetter,
    Location,
    RequestInfo,
    ResultRecord,
    VerificationReport,
    build_report,
    decode_embedding,
    source_location,
)

MODEL = "text-embedding-3-small"
HIGH = "embed.requests.high"
LOW = "embed.requests.low"


def req(text: str, model: str | None = None, dimensions: int | None = 8) -> RequestInfo:
    return RequestInfo(text, model, dimensions, LOW)


def vec(text: str, dimensions: int = 8, model: str = MODEL) -> list[float]:
    return expected_vector(model, text, dimensions)


def res(rid: str, embedding: list[float] | str, **extra: Any) -> ResultRecord:
    return ResultRecord(rid, {"id": rid, "model": MODEL, "embedding": embedding, **extra})


def ok_res(rid: str, text: str, dimensions: int = 8) -> ResultRecord:
    return res(rid, vec(text, dimensions))


def dl(rid: str | None, location: Location | None = None) -> DeadLetter:
    headers = {"embedstream.error.reason": "invalid_json"}
    if location is not None:
        headers |= {
            "embedstream.source.topic": location.topic,
            "embedstream.source.partition": str(location.partition),
            "embedstream.source.offset": str(location.offset),
        }
    return DeadLetter(rid, headers)


REQUESTS = {"a": req("alpha"), "b": req("bravo"), "c": req("charlie")}
CLEAN_RESULTS = [ok_res("a", "alpha"), ok_res("b", "bravo")]
BAD_JSON = Location(HIGH, 2, 7)


@dataclass
class Case:
    id: str
    requests: Mapping[str, RequestInfo] = field(default_factory=lambda: REQUESTS)
    results: Sequence[ResultRecord] = field(default_factory=lambda: list(CLEAN_RESULTS))
    dead_letters: Sequence[DeadLetter] = field(default_factory=lambda: [dl("c")])
    unparseable: Sequence[Location] = ()
    check: bool = True
    max_duplicates: int = 0
    ok: bool = True
    lost: tuple[str, ...] = ()
    duplicates: Mapping[str, int] = field(default_factory=dict)
    misattributed: tuple[str, ...] = ()
    in_both: tuple[str, ...] = ()
    unknown_results: tuple[str, ...] = ()
    unparseable_lost: tuple[str, ...] = ()
    vectors_compared: int | None = None
    vectors_skipped: int = 0


CASES = [
    Case("clean", vectors_compared=2),
    Case("clean-unchecked", check=False, vectors_compared=0),
    Case("lost", results=[ok_res("a", "alpha")], ok=False, lost=("b",)),
    Case("lost-several-sorted", results=[], dead_letters=[], ok=False, lost=("a", "b", "c")),
    Case(
        "duplicate-not-allowed",
        results=[*CLEAN_RESULTS, ok_res("a", "alpha")],
        ok=False,
        duplicates={"a": 2},
    ),
    Case(
        "duplicate-allowed",
        results=[*CLEAN_RESULTS, ok_res("a", "alpha")],
        max_duplicates=1,
        duplicates={"a": 2},
    ),
    Case(
        "duplicates-count-extra-records",
        results=[*CLEAN_RESULTS, ok_res("a", "alpha"), ok_res("a", "alpha")],
        max_duplicates=1,
        ok=False,
        duplicates={"a": 3},
    ),
    Case(
        "duplicates-within-limit",
        results=[*CLEAN_RESULTS, ok_res("a", "alpha"), ok_res("b", "bravo")],
        max_duplicates=2,
        duplicates={"a": 2, "b": 2},
    ),
    Case(
        "misattributed-float",
        results=[ok_res("a", "alpha"), res("b", vec("alpha"))],
        ok=False,
        misattributed=("b",),
    ),
    Case(
        "misattributed-float-unchecked",
        results=[ok_res("a", "alpha"), res("b", vec("alpha"))],
        check=False,
    ),
    Case(
        "misattributed-slightly-off",
        results=[ok_res("a", "alpha"), res("b", [x + 1e-3 for x in vec("bravo")])],
        ok=False,
        misattributed=("b",),
    ),
    Case(
        "float-within-tolerance",
        results=[ok_res("a", "alpha"), res("b", [x + 1e-9 for x in vec("bravo")])],
    ),
    Case(
        "misattributed-base64",
        results=[ok_res("a", "alpha"), res("b", encode_base64(vec("alpha")))],
        ok=False,
        misattributed=("b",),
    ),
    Case("base64-correct", results=[ok_res("a", "alpha"), res("b", encode_base64(vec("bravo")))]),
    Case(
        "misattributed-wrong-dimensions",
        results=[ok_res("a", "alpha"), res("b", vec("bravo", 4))],
        ok=False,
        misattributed=("b",),
    ),
    Case(
        "misattributed-unreadable",
        results=[ok_res("a", "alpha"), res("b", "not base64!")],
        ok=False,
        misattributed=("b",),
    ),
    Case(
        "misattributed-only-one-of-duplicates",
        results=[*CLEAN_RESULTS, res("a", vec("bravo"))],
        max_duplicates=1,
        ok=False,
        duplicates={"a": 2},
        misattributed=("a",),
    ),
    Case(
        "dimensions-from-vector-when-not-requested",
        requests={"a": req("alpha", dimensions=None)},
        results=[ok_res("a", "alpha", dimensions=16)],
        dead_letters=[],
    ),
    Case(
        "request-model-wins",
        requests={"a": req("alpha", model="other-model")},
        results=[res("a", vec("alpha", model="other-model"))],
        dead_letters=[],
    ),
    Case(
        "request-model-mismatch",
        requests={"a": req("alpha", model="other-model")},
        results=[ok_res("a", "alpha")],
        dead_letters=[],
        ok=False,
        misattributed=("a",),
    ),
    Case(
        "truncated-not-checked",
        results=[ok_res("a", "alpha"), ResultRecord("b", {"embedding": vec("x")}, True)],
        vectors_compared=1,
        vectors_skipped=1,
    ),
    Case(
        "in-both",
        dead_letters=[dl("b"), dl("c")],
        ok=False,
        in_both=("b",),
    ),
    Case(
        "unknown-result-is-reported-but-ok",
        results=[*CLEAN_RESULTS, ok_res("zulu", "zulu")],
        unknown_results=("zulu",),
    ),
    Case(
        "unparseable-dead-lettered-by-location",
        unparseable=[BAD_JSON],
        dead_letters=[dl("c"), dl(None, BAD_JSON)],
    ),
    Case(
        "unparseable-dead-lettered-without-headers",
        unparseable=[BAD_JSON],
        dead_letters=[dl("c"), dl(None)],
    ),
    Case(
        "unparseable-not-dead-lettered",
        unparseable=[BAD_JSON, Location(LOW, 0, 3)],
        dead_letters=[dl("c"), dl(None, Location(LOW, 0, 3))],
        ok=False,
        unparseable_lost=(f"{HIGH}:2:7",),
    ),
    Case(
        "dead-letter-elsewhere-does-not-cover-unparseable",
        unparseable=[BAD_JSON],
        dead_letters=[dl("c", Location(LOW, 1, 1))],
        ok=False,
        unparseable_lost=(f"{HIGH}:2:7",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_report(case: Case) -> None:
    report = build_report(
        case.requests,
        case.results,
        case.dead_letters,
        expected=expected_vector if case.check else None,
        default_model=MODEL,
        max_duplicates=case.max_duplicates,
        unparseable_requests=case.unparseable,
    )
    assert report.lost == case.lost
    assert dict(report.duplicates) == dict(case.duplicates)
    assert report.misattributed == case.misattributed
    assert set(report.mismatches) == set(case.misattributed)
    assert report.in_both == case.in_both
    assert report.unknown_results == case.unknown_results
    assert report.unparseable_lost == case.unparseable_lost
    assert report.ok is case.ok, report.summary()
    assert report.requests == len(case.requests)
    assert report.results == len(case.results)
    assert report.dead_letters == len(case.dead_letters)
    assert report.unparseable_requests == len(case.unparseable)
    assert report.vectors_checked is case.check
    if case.vectors_compared is not None:
        assert report.vectors_compared == case.vectors_compared
    assert report.vectors_skipped == case.vectors_skipped
    # Every rendering works and agrees on the verdict.
    assert report.summary().splitlines()[0].endswith("OK" if case.ok else "FAILED")
    document = orjson.loads(orjson.dumps(report.to_json()))
    assert document["ok"] is case.ok
    assert document["lost"] == list(case.lost)


def test_plain_tuples_are_accepted() -> None:
    report = build_report(
        {"a": ("alpha", None, 8, LOW), "b": ("bravo", None, None, HIGH)},
        [("a", {"id": "a", "embedding": vec("alpha")})],
        [("b", {})],
        expected=expected_vector,
        default_model=MODEL,
    )
    assert report.ok
    assert (report.requests, report.results, report.dead_letters) == (2, 1, 1)


def test_model_falls_back_to_the_results_own_model() -> None:
    doc = {"id": "a", "model": "m2", "embedding": vec("alpha", model="m2")}
    report = build_report({"a": req("alpha")}, [("a", doc)], [], expected=expected_vector)
    assert report.ok and report.vectors_compared == 1


def test_negative_max_duplicates_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_duplicates"):
        build_report({}, [], [], max_duplicates=-1)


def test_summary_lists_the_offending_ids() -> None:
    report = build_report(
        REQUESTS,
        [ok_res("a", "alpha"), ok_res("a", "alpha"), res("c", vec("alpha"))],
        [dl("c")],
        expected=expected_vector,
        default_model=MODEL,
    )
    assert not report.ok
    text = report.summary()
    assert "lost: b" in text
    assert "duplicates: a x2" in text
    assert "misattributed: c (component 0" in text
    assert "in both: c" in text
    assert report.to_json()["duplicate_results"] == 1


def test_empty_report_is_ok() -> None:
    report = build_report({}, [], [])
    assert report.ok
    assert isinstance(report, VerificationReport)
    assert "not checked" in report.summary()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([1, 0.5, -2.0], [1.0, 0.5, -2.0]),
        (base64.b64encode(struct.pack("<2f", 0.25, -1.5)).decode(), [0.25, -1.5]),
        ("", []),
    ],
)
def test_decode_embedding(value: object, expected: list[float]) -> None:
    assert decode_embedding(value) == expected


@pytest.mark.parametrize(
    "value", [None, 3, {"x": 1}, [1, "2"], [True], "!!!", base64.b64encode(b"abc").decode()]
)
def test_decode_embedding_rejects(value: object) -> None:
    with pytest.raises(ValueError):
        decode_embedding(value)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            {
                "embedstream.source.topic": "t",
                "embedstream.source.partition": "1",
                "embedstream.source.offset": "9",
            },
            Location("t", 1, 9),
        ),
        ({"embedstream.source.topic": "t", "embedstream.source.partition": "1"}, None),
        ({"embedstream.source.partition": "1", "embedstream.source.offset": "2"}, None),
        (
            {
                "embedstream.source.topic": "t",
                "embedstream.source.partition": "x",
                "embedstream.source.offset": "2",
            },
            None,
        ),
    ],
)
def test_source_location(headers: dict[str, str], expected: Location | None) -> None:
    assert source_location(headers) == expected
