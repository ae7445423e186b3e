"""`embedstream produce --documents / --delete` without a broker: keys, values, sources."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import orjson
import pytest
from embedstream.cli import build_parser, main
from embedstream.errors import EmbedStreamError
from embedstream.settings import Settings
from embedstream.tools.produce_documents import (
    Message,
    document_from_file,
    document_messages,
    each,
    produce_messages,
    tombstone,
)
from embedstream.wire import decode_output
from embedstream.wire.document_events import document_from_doc

from tests.unit.test_produce import FakeProducer

SETTINGS = Settings(topic_prefix="t.")


async def collect(paths: list[Path], stdin: bytes | None = None) -> list[Message]:
    source = io.BytesIO(stdin) if stdin is not None else None
    return [m async for m in document_messages(paths, source)]


async def test_each_file_is_one_document_keyed_by_its_path(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\nFirst paragraph.\n\nSecond ✓.\n")
    (tmp_path / "b.txt").write_text("")
    paths = [tmp_path / "a.md", tmp_path / "b.txt"]
    producer = FakeProducer()
    sent = await produce_messages(
        SETTINGS, document_messages(paths), priority="low", producer=producer
    )
    assert sent == 2
    for (topic, value, key), path in zip(producer.sent, paths, strict=True):
        event = document_from_doc(
            orjson.loads(value or b"")
        )  # the processor's own parser accepts it
        assert topic == "t.requests.low"
        assert key == str(path).encode() and event.doc_id == str(path)
        assert event.text == path.read_text()  # byte for byte, blank lines kept
        assert event.version is None  # the processor names it by the digest of the text


async def test_json_lines_are_keyed_by_doc_id_and_sent_byte_for_byte(tmp_path: Path) -> None:
    lines = b'{"doc_id": "d1", "text": "x", "version": 2}\n\n{"doc_id": "d2", "text": "y"}\nnope\n'
    (tmp_path / "docs.jsonl").write_bytes(lines)
    from_file = await collect([tmp_path / "docs.jsonl"])
    from_stdin = await collect([], stdin=lines)
    expected = [
        Message(b"d1", b'{"doc_id": "d1", "text": "x", "version": 2}'),
        Message(b"d2", b'{"doc_id": "d2", "text": "y"}'),
        Message(None, b"nope"),  # the processor dead-letters it with its reason
    ]
    assert from_file == expected and from_stdin == expected


async def test_a_missing_file_fails_before_anything_is_sent(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("fine")
    producer = FakeProducer()
    with pytest.raises(EmbedStreamError, match=r"nope\.md"):
        await produce_messages(
            SETTINGS,
            document_messages([tmp_path / "ok.md", tmp_path / "nope.md"]),
            priority="high",
            producer=producer,
        )
    assert producer.sent == [] and producer.stopped


def test_a_file_that_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "bin.dat"
    path.write_bytes(b"ok \xff\xfe")
    with pytest.raises(EmbedStreamError, match=r"bin.dat: not UTF-8 text at byte 3"):
        document_from_file(path)


async def test_delete_publishes_tombstones_that_decode_as_deletes() -> None:
    producer = FakeProducer()
    sent = await produce_messages(
        SETTINGS, each([tombstone("d1"), tombstone("a/b.md")]), priority="high", producer=producer
    )
    assert sent == 2
    assert producer.sent == [("t.requests.high", None, b"d1"), ("t.requests.high", None, b"a/b.md")]
    assert decode_output(b"d1", None).doc_id == "d1"  # type: ignore[union-attr]
    with pytest.raises(EmbedStreamError, match="must not be empty"):
        tombstone("")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--delete", "d", "--documents"], "--delete takes doc_ids only"),
        (["--documents", "--plain"], "exclude each other"),
        (["a.txt", "b.txt"], "several files need --documents"),
    ],
)
def test_conflicting_produce_options_fail_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["produce", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_help_says_why_documents_are_keyed_by_doc_id() -> None:
    parser = build_parser()
    ns = parser.parse_args(["produce", "--documents", "x.md", "y.md"])
    assert ns.files == [Path("x.md"), Path("y.md")] and ns.documents
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    help_text = " ".join(sub.choices["produce"].format_help().split())
    assert "one partition, in order" in help_text
