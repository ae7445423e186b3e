"""`embedstream produce` without a broker: streaming input, generated ids, progress output."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from embedstream.settings import Settings
from embedstream.testing import FakeClock
from embedstream.tools.produce import input_size, parse_line, produce_lines, read_lines
from embedstream.tools.progress import PlainProgress, TerminalProgress, make_progress

SETTINGS = Settings(topic_prefix="t.")


class FakeProducer:
    """Records sends; each send's acknowledgement is already done."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None]] = []
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def send(
        self, topic: str, value: bytes | None, key: bytes | None = None
    ) -> asyncio.Future[Any]:
        self.sent.append((topic, value, key))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def each(lines: Iterable[bytes]) -> AsyncIterator[bytes]:
    for line in lines:
        yield line


class RefusingProducer(FakeProducer):
    async def start(self) -> None:
        raise ConnectionRefusedError("no broker")


async def test_input_is_pulled_line_by_line_not_read_whole() -> None:
    producer = FakeProducer()
    pulled = 0
    seen_at_send: list[int] = []

    async def lines() -> AsyncIterator[bytes]:
        nonlocal pulled
        for i in range(5000):
            pulled += 1
            seen_at_send.append(len(producer.sent))
            yield b'{"id": "r%d", "text": "t"}\n' % i

    sent = await produce_lines(SETTINGS, lines(), priority="low", plain=False, producer=producer)
    assert sent == 5000 and pulled == 5000
    # When line i was pulled, lines 0..i-1 had already been sent: nothing was read ahead.
    assert seen_at_send == list(range(5000))
    assert producer.started and producer.stopped


async def test_json_lines_go_byte_for_byte_with_their_id_as_key() -> None:
    producer = FakeProducer()
    raw = [b'{"id": "a", "text": "x"}\r\n', b"  \n", b"not json \xff\n", b'{"text": "no id"}']
    await produce_lines(SETTINGS, each(raw), priority="high", plain=False, producer=producer)
    assert producer.sent == [
        ("t.requests.high", b'{"id": "a", "text": "x"}', b"a"),
        ("t.requests.high", b"not json \xff", None),  # the processor dead-letters it
        ("t.requests.high", b'{"text": "no id"}', None),
    ]


async def test_ids_out_round_trips_plain_texts() -> None:
    producer = FakeProducer()
    texts = ["first text", "tab\tinside", "ünïcode ✓", "bad \ufffd byte"]
    source = [b"first text\n", b"tab\tinside\n", "ünïcode ✓\n".encode(), b"bad \xff byte\n"]
    ids_out = io.BytesIO()
    sent = await produce_lines(
        SETTINGS, each(source), priority="low", plain=True, ids_out=ids_out, producer=producer
    )
    assert sent == 4
    rows = [line.split("\t", 1) for line in ids_out.getvalue().decode().splitlines()]
    by_id = {request_id: text for request_id, text in rows}
    requests = [orjson.loads(value or b"") for _, value, _ in producer.sent]
    # Every generated id maps to exactly the text sent with it, in input order.
    assert [by_id[r["id"]] for r in requests] == texts
    assert [r["text"] for r in requests] == texts
    assert [key for _, _, key in producer.sent] == [r["id"].encode() for r in requests]


async def test_a_failed_start_still_closes_the_client() -> None:
    producer = RefusingProducer()
    with pytest.raises(ConnectionRefusedError):
        await produce_lines(SETTINGS, each([b"x\n"]), priority="low", plain=True, producer=producer)
    assert producer.stopped


async def test_read_lines_splits_chunks_and_keeps_a_last_line_without_break() -> None:
    body = b"".join(b"line %d\n" % i for i in range(20_000)) + b"no break at the end"
    lines = [line async for line in read_lines(io.BytesIO(body))]
    assert len(lines) == 20_001  # spans several 64 KiB chunks
    assert b"".join(lines) == body
    assert lines[-1] == b"no break at the end"


async def test_read_lines_yields_what_a_pipe_has_without_waiting_for_more() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader, os.fdopen(write_fd, "wb") as writer:
        writer.write(b"first\nsecond\n")
        writer.flush()
        lines = read_lines(reader)
        # The writer stays open: a whole-input read would never return.
        got = [await asyncio.wait_for(anext(lines), 5) for _ in range(2)]
        assert got == [b"first\n", b"second\n"]
        writer.close()
        assert [line async for line in lines] == []


def test_parse_line_plain_generates_fresh_ids() -> None:
    one, two = parse_line(b"same", plain=True), parse_line(b"same", plain=True)
    assert one.generated_id != two.generated_id
    assert one.key == (one.generated_id or "").encode()


# --------------------------------------------------------------------------- progress


def test_plain_progress_writes_whole_lines_every_few_seconds() -> None:
    clock = FakeClock()
    out = io.StringIO()
    progress = PlainProgress(out, total_bytes=1_000_000, clock=clock, interval_s=5.0)
    for step in range(1, 101):  # 10 lines of 1 kB per 100 ms: 1,000 requests over 10 s
        clock.now = step / 10
        progress.advance(10, 10_000)
    progress.finish()
    lines = out.getvalue().splitlines()
    assert lines == [
        "produce: 500 sent (100/s), 500.0 kB of 1.0 MB read (50%)",
        "produce: 1,000 sent (100/s), 1.0 MB of 1.0 MB read (100%)",
    ]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_plain_progress_without_a_size_counts_requests_only() -> None:
    clock = FakeClock()
    out = io.StringIO()
    progress = PlainProgress(out, total_bytes=None, clock=clock, interval_s=5.0)
    clock.advance(4.999)
    progress.advance(7, 70)
    assert out.getvalue() == ""
    clock.advance(0.001)
    progress.advance(3, 30)
    assert out.getvalue() == "produce: 10 sent (2/s)\n"


def test_a_file_gets_plain_lines_and_a_terminal_gets_a_bar(tmp_path: Path) -> None:
    with (tmp_path / "err").open("w") as fh:
        assert isinstance(make_progress(fh, 10), PlainProgress)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    bar = make_progress(Tty(), 1000)
    try:
        assert isinstance(bar, TerminalProgress)
    finally:
        bar.finish()


def test_input_size_is_known_for_files_only(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"a\nbb\n")
    with path.open("rb") as fh:
        assert input_size(fh) == 5
        fh.readline()
        assert input_size(fh) == 3
    assert input_size(io.BytesIO(b"abc")) is None
