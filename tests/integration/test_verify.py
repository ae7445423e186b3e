"""`embedstream verify` against a real broker, with hand-made results and dead letters."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from embedsim.model import encode_base64, expected_vector
from embedstream.core.document_versions import default_version
from embedstream.kafka.client.admin import TopicNames, create_topics, load_topic_specs, topic_names
from embedstream.kafka.client.clients import producer_for
from embedstream.kafka.client.reader import ReadError
from embedstream.tools.embedded import EmbeddedBroker
from embedstream.tools.verify.app import add_cli_arguments, main_from_args, verify

from tests.integration.helpers import publish, request

pytestmark = pytest.mark.integration

MODEL = "text-embedding-3-small"
Headers = list[tuple[str, bytes]]


def result(rid: str, text: str, *, dimensions: int = 8, base64: bool = False) -> bytes:
    vector = expected_vector(MODEL, text, dimensions)
    embedding: list[float] | str = encode_base64(vector) if base64 else vector
    return orjson.dumps(
        {"id": rid, "model": MODEL, "embedding": embedding, "dimensions": dimensions}
    )


def dead_letter_headers(topic: str, partition: int, offset: int) -> Headers:
    pairs = {
        "error.class": "InvalidEvent",
        "error.reason": "invalid_json",
        "error.message": "hand-made",
        "error.attempts": "0",
        "source.topic": topic,
        "source.partition": str(partition),
        "source.offset": str(offset),
    }
    return [("embedstream." + k, v.encode()) for k, v in pairs.items()]


async def setup_topics(bootstrap: str, prefix: str) -> TopicNames:
    await create_topics(bootstrap, load_topic_specs(prefix))
    return topic_names(prefix)


async def send(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None, Headers]]
) -> list[Any]:
    """Publishes and returns each record's metadata (partition, offset)."""
    producer = producer_for(bootstrap, acks="all")
    await producer.start()
    try:
        return [
            await producer.send_and_wait(topic, value, key=key, headers=headers)
            for key, value, headers in records
        ]
    finally:
        await producer.stop()


async def test_report_names_exactly_the_faults(bootstrap: str, unique_prefix: str) -> None:
    names = await setup_topics(bootstrap, unique_prefix)
    await publish(
        bootstrap,
        names.requests_high,
        [request("ok-1", "one", dimensions=8), request("lost-1", "lost", dimensions=8)],
    )
    await publish(
        bootstrap,
        names.requests_low,
        [
            request("ok-2", "two", dimensions=8, encoding_format="base64"),
            request("dup-1", "dup", dimensions=8),
            request("wrong-1", "wrong", dimensions=8),
            request("both-1", "both", dimensions=8),
            request("dead-1", "   ", dimensions=8),
        ],
    )
    [bad] = await send(bootstrap, names.requests_high, [(b"junk", b"{not json", [])])
    await publish(
        bootstrap,
        names.results,
        [
            (b"ok-1", result("ok-1", "one")),
            (b"ok-2", result("ok-2", "two", base64=True)),
            (b"dup-1", result("dup-1", "dup")),
            (b"dup-1", result("dup-1", "dup")),
            (b"wrong-1", result("wrong-1", "one")),  # ok-1's vector under wrong-1's id
            (b"both-1", result("both-1", "both")),
            (b"ghost", result("ghost", "ghost")),  # never requested
        ],
    )
    await send(
        bootstrap,
        names.dead_letters,
        [
            (b"both-1", orjson.dumps({"id": "both-1", "text": "both"}), []),
            (b"dead-1", orjson.dumps({"id": "dead-1", "text": "   "}), []),
            (b"junk", b"{not json", dead_letter_headers(bad.topic, bad.partition, bad.offset)),
        ],
    )

    report = await verify(
        bootstrap, unique_prefix, check_vectors=True, default_model=MODEL, timeout_s=60
    )

    assert report.requests == 7
    assert report.results == 7
    assert report.dead_letters == 3
    assert report.lost == ("lost-1",)
    assert dict(report.duplicates) == {"dup-1": 2}
    assert report.misattributed == ("wrong-1",)
    assert report.in_both == ("both-1",)
    assert report.unknown_results == ("ghost",)
    assert report.unparseable_requests == 1
    assert report.unparseable_lost == ()
    assert report.vectors_compared == 6  # ghost has no request to compare with
    assert not report.ok

    # Without the vector check the wrong vector goes unnoticed; the rest stays.
    unchecked = await verify(
        bootstrap, unique_prefix, check_vectors=False, default_model=MODEL, max_duplicates=1
    )
    assert unchecked.misattributed == ()
    assert unchecked.lost == ("lost-1",) and unchecked.in_both == ("both-1",)
    assert not unchecked.ok


async def test_clean_run_is_ok(
    bootstrap: str, unique_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    names = await setup_topics(bootstrap, unique_prefix)
    ids = [f"doc-{i}" for i in range(40)]
    await publish(
        bootstrap,
        names.requests_low,
        [request(rid, f"text {rid}") for rid in ids[:20]],  # no dimensions: taken from vector
    )
    await publish(
        bootstrap,
        names.requests_high,
        [request(rid, f"text {rid}", dimensions=16) for rid in ids[20:]],
    )
    [bad] = await send(bootstrap, names.requests_low, [(None, b"\xff\xfe", [])])
    await send(
        bootstrap,
        names.dead_letters,
        [(None, b"\xff\xfe", dead_letter_headers(bad.topic, bad.partition, bad.offset))],
    )

    # Results through transactions, as the processor's producer may write them: the reader
    # must step over the commit markers, and must not see the aborted transaction.
    producer = producer_for(
        bootstrap,
        transactional_id=f"verify-test-{uuid.uuid4().hex}",
        enable_idempotence=True,
        acks="all",
    )
    await producer.start()
    try:
        for chunk in (ids[:15], ids[15:]):
            async with producer.transaction():
                for rid in chunk:
                    dims = 16 if rid in ids[20:] else 8
                    value = result(rid, f"text {rid}", dimensions=dims, base64=rid.endswith("7"))
                    await producer.send_and_wait(names.results, value, key=rid.encode())
        await producer.begin_transaction()
        await producer.send_and_wait(names.results, result(ids[0], "nonsense"), key=b"doc-0")
        await producer.abort_transaction()
    finally:
        await producer.stop()

    report = await verify(
        bootstrap, unique_prefix, check_vectors=True, default_model=MODEL, timeout_s=60
    )
    assert report.ok, report.summary()
    assert (report.requests, report.results, report.dead_letters) == (40, 40, 1)
    assert report.unparseable_requests == 1
    assert report.vectors_compared == 40

    # The command-line entry point prints the same verdict and exits 0.
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    ns = parser.parse_args(
        [
            "--bootstrap-servers",
            bootstrap,
            "--topic-prefix",
            unique_prefix,
            "--check-vectors",
            "--json",
            "--timeout",
            "60",
        ]
    )
    assert await main_from_args(ns) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert document["ok"] is True
    assert document["requests"] == 40

    # A lost request turns the exit status to 1.
    await publish(bootstrap, names.requests_high, [request("late", "late")])
    ns = parser.parse_args(["--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix])
    assert await main_from_args(ns) == 1
    out = capsys.readouterr().out
    assert out.startswith("embedstream verify: FAILED")
    assert "lost: late" in out


async def test_missing_topics_are_an_error(bootstrap: str, unique_prefix: str) -> None:
    with pytest.raises(ReadError, match="does not exist"):
        await verify(bootstrap, unique_prefix, check_vectors=False, default_model=MODEL)


async def test_verify_reads_the_embedded_broker_to_the_end() -> None:
    """The embedded demo broker answers end_offsets() with 1 for every partition; verify
    reads to the ends its fetches report instead, so a clean run there reports nothing lost."""
    broker = EmbeddedBroker()
    await broker.start()
    try:
        prefix = "embedded."
        names = await setup_topics(broker.bootstrap, prefix)
        ids = [f"e{i}" for i in range(200)]
        await publish(broker.bootstrap, names.requests_low, [request(i, f"t {i}") for i in ids])
        await send(
            broker.bootstrap,
            names.results,
            [(i.encode(), result(i, f"t {i}"), []) for i in ids],
        )
        report = await verify(
            broker.bootstrap, prefix, check_vectors=True, default_model=MODEL, timeout_s=60
        )
    finally:
        broker.stop()
    assert report.ok, report.summary()
    assert (report.requests, report.results, report.lost) == (200, 200, ())


async def test_document_breaches_are_reported_from_real_topics(
    bootstrap: str, unique_prefix: str
) -> None:
    from embedstream.wire.result_records import ChunkResult, DocumentComplete

    names = await setup_topics(bootstrap, unique_prefix)
    events: list[tuple[bytes | None, bytes | None, Headers]] = [
        (b"ok", orjson.dumps({"doc_id": "ok", "text": "x", "version": 1}), []),
        (b"hole", orjson.dumps({"doc_id": "hole", "text": "y\n\nz", "version": 1}), []),
        (b"never", orjson.dumps({"doc_id": "never", "text": "w"}), []),
    ]
    await send(bootstrap, names.requests_low, events)
    await send(bootstrap, names.requests_low, [(b"ok", None, [])])

    def chunk(doc_id: str, seq: int, count: int) -> tuple[bytes, bytes | None, Headers]:
        record = ChunkResult(doc_id, "1", seq, count, (0, 1), [1.0], MODEL, 1, 1, False, None, 1, 0)
        return record.key, record.encode(), []

    complete_ok, complete_hole = (
        DocumentComplete("ok", "1", 1, None),
        DocumentComplete("hole", "1", 2, None),
    )
    await send(
        bootstrap,
        names.results,
        [
            chunk("ok", 0, 1),
            (complete_ok.key, complete_ok.encode(), []),
            (b"ok", None, []),
            chunk("hole", 1, 2),  # chunk 0 never written
            (complete_hole.key, complete_hole.encode(), []),
        ],
    )
    report = await verify(bootstrap, unique_prefix, check_vectors=False, default_model=MODEL)
    documents = report.documents
    assert documents is not None and not report.ok
    assert (documents.versions, documents.tombstones, documents.deleted) == (3, 1, 1)
    assert documents.lost == ("never@" + default_version("w"),)
    assert documents.violations == ("hole@1: complete without chunks [0]",)
    assert report.requests == 0 and report.unparseable_requests == 0  # none mistaken for requests
