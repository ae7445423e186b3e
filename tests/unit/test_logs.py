from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import orjson
import pytest
from embedstream.ops.logs import (
    JsonFormatter,
    SummarisingHandler,
    discard_summaries,
    setup_logging,
)
from embedstream.testing import FakeClock

HTTPX = ("httpx2", logging.INFO, 'HTTP Request: %s %s "%s %d %s"')
HTTP_ARGS = ("POST", "http://p/v1/embeddings", "HTTP/1.1", 200, "OK")
REFUSED = ("aiokafka.client", logging.ERROR, "Unable connect to node with id %s: %s")
REFUSED_ARGS = (1, "[Errno 111] Connect call failed")


def record(
    spec: tuple[str, int, str], args: tuple[object, ...] = (), created: float = 0.0
) -> logging.LogRecord:
    name, level, msg = spec
    rec = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    rec.created = created
    return rec


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def out() -> Collect:
    return Collect()


@pytest.fixture
def handler(out: Collect, clock: FakeClock) -> SummarisingHandler:
    return SummarisingHandler(out, interval_s=10.0, clock=clock)


def feed(
    handler: SummarisingHandler,
    clock: FakeClock,
    spec: tuple[str, int, str],
    args: tuple[object, ...],
    times_ms: list[int],
) -> None:
    for ms in times_ms:
        clock.now = ms / 1000
        handler.handle(record(spec, args, created=ms / 1000))


def test_http_lines_pass_once_then_one_summary_per_interval(
    handler: SummarisingHandler, out: Collect, clock: FakeClock
) -> None:
    line = 'HTTP Request: POST http://p/v1/embeddings "HTTP/1.1 200 OK"'
    # 0 ms passes; 1..9999 ms are counted; 10000 ms closes the interval as its summary.
    feed(handler, clock, HTTPX, HTTP_ARGS, [0, 1, 5000, 9999])
    assert out.messages == [line]
    feed(handler, clock, HTTPX, HTTP_ARGS, [10_000])
    assert out.messages[1] == f"{line} (4 similar lines suppressed in the last 10 s)"
    assert out.records[1].suppressed == 4  # type: ignore[attr-defined]
    assert out.records[1].levelno == logging.INFO and out.records[1].name == "httpx2"
    # The next interval starts at 10000 ms: 19999 ms is still inside it.
    feed(handler, clock, HTTPX, HTTP_ARGS, [10_001, 19_999])
    assert len(out.records) == 2
    feed(handler, clock, HTTPX, HTTP_ARGS, [20_000])
    assert out.messages[2].endswith("(3 similar lines suppressed in the last 10 s)")


def test_a_quiet_run_ends_with_a_summary_before_the_next_line(
    handler: SummarisingHandler, out: Collect, clock: FakeClock
) -> None:
    feed(handler, clock, HTTPX, HTTP_ARGS, [0, 100, 2500])
    other = ("embedstream.app.processor", logging.INFO, "stopped cleanly")
    clock.now = 12.499  # 9999 ms after the last HTTP line: the run is not over yet
    handler.handle(record(other))
    assert len(out.records) == 2
    clock.now = 12.5
    handler.handle(record(other))
    assert out.messages[2] == (
        "2 similar lines suppressed in 2.5 s; latest: HTTP Request: POST http://p/v1/embeddings "
        '"HTTP/1.1 200 OK"'
    )
    assert out.records[2].created > 2.5  # stamped when written, so lines stay in time order
    assert out.messages[3] == "stopped cleanly"
    # A new run after the quiet one passes its first line again.
    feed(handler, clock, HTTPX, HTTP_ARGS, [13_000])
    assert out.messages[4].startswith("HTTP Request:")


def test_a_broker_outage_is_one_line_per_interval(
    handler: SummarisingHandler, out: Collect, clock: FakeClock
) -> None:
    metadata = ("aiokafka.client", logging.ERROR, "Unable to update metadata from %s")
    # A reconnect attempt every 100 ms for 25 s, with metadata errors in between.
    for ms in range(0, 25_000, 100):
        clock.now = ms / 1000
        handler.handle(record(REFUSED, REFUSED_ARGS, created=clock.now))
        handler.handle(record(metadata, ([1],), created=clock.now))
    # 201: the held first line, 199 more before 10 s and the line that became the summary.
    assert out.messages == [
        "Kafka broker unreachable for 10 s, retrying (201 similar lines suppressed; "
        "latest: Unable connect to node with id 1: [Errno 111] Connect call failed)",
        "Kafka broker unreachable for 20 s, retrying (200 similar lines suppressed; "
        "latest: Unable connect to node with id 1: [Errno 111] Connect call failed)",
    ]
    assert {r.levelno for r in out.records} == {logging.ERROR}
    # Reconnected: lines stop; the rest is summarised once the run has been quiet long enough.
    clock.now = 34.899
    handler.flush()
    assert len(out.records) == 2
    clock.now = 34.9
    handler.flush()
    assert out.messages[2] == (
        "99 similar lines suppressed in 4.9 s; latest: Unable to update metadata from [1]"
    )


def test_a_lone_held_line_is_shown_as_it_was(
    handler: SummarisingHandler, out: Collect, clock: FakeClock
) -> None:
    feed(handler, clock, REFUSED, REFUSED_ARGS, [0])
    assert out.records == []  # held: a command failing now would report it in its own words
    clock.now = 10.0
    handler.flush()
    assert out.messages == ["Unable connect to node with id 1: [Errno 111] Connect call failed"]
    assert out.records[0].created == 0.0


def test_close_writes_pending_summaries_and_discard_drops_them(
    out: Collect, clock: FakeClock
) -> None:
    first = SummarisingHandler(out, clock=clock)
    feed(first, clock, REFUSED, REFUSED_ARGS, [0, 1, 2])
    first.close()
    assert out.messages == [
        "3 similar lines suppressed in 0.0 s; latest: Unable connect to node with id 1: "
        "[Errno 111] Connect call failed"
    ]
    second = SummarisingHandler(out, clock=clock)
    feed(second, clock, REFUSED, REFUSED_ARGS, [3, 4])
    second.discard()
    second.close()
    assert len(out.records) == 1


def test_other_aiokafka_warnings_repeat_per_template(
    handler: SummarisingHandler, out: Collect, clock: FakeClock
) -> None:
    missing = ("aiokafka.cluster", logging.ERROR, "Topic %s not found in cluster metadata")
    heartbeat = ("aiokafka.consumer.group_coordinator", logging.WARNING, "Heartbeat failed: %r")
    for ms in range(0, 10_001, 25):  # a metadata refresh every 25 ms, about 1200 in 30 s
        clock.now = ms / 1000
        handler.handle(record(missing, ("embed.retry",)))
    handler.handle(record(heartbeat, ("boom",)))
    assert out.messages == [
        "Topic embed.retry not found in cluster metadata",
        "Topic embed.retry not found in cluster metadata "
        "(400 similar lines suppressed in the last 10 s)",
        "Heartbeat failed: 'boom'",
    ]


@pytest.mark.parametrize(
    "spec",
    [
        (
            "embedstream.kafka.consumption.processor_loop",
            logging.INFO,
            "HTTP Request: not the http client",
        ),
        ("httpx2", logging.WARNING, "something else entirely"),
        ("aiokafka.conn", logging.INFO, "Unable connect to x (below WARNING)"),
        ("aiokafkaesque", logging.ERROR, "Unable connect to y"),
    ],
)
def test_unrelated_lines_are_never_summarised(
    handler: SummarisingHandler, out: Collect, clock: FakeClock, spec: tuple[str, int, str]
) -> None:
    feed(handler, clock, spec, (), [0, 1, 2])
    assert len(out.records) == 3


def test_aiokafkas_tracebacks_become_one_line_and_ours_stay(
    handler: SummarisingHandler, out: Collect
) -> None:
    """After a broker restart aiokafka logs "Unexpected error in sender routine" with a
    traceback of an error it also raises to us, and we handle it: one line, not a traceback."""
    formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    for name in ("aiokafka.producer.sender", "embedstream.engine.calls"):
        try:
            try:
                raise OSError("unknown error (-1)")
            except OSError as cause:
                raise RuntimeError("Unexpected error during batch delivery") from cause
        except RuntimeError:
            rec = logging.LogRecord(name, logging.ERROR, __file__, 1, "sender %s", ("died",),
                                    sys.exc_info())  # fmt: skip
        handler.handle(rec)
    theirs, ours = (formatter.format(r) for r in out.records)
    assert "Traceback" not in theirs
    assert theirs == (
        "ERROR aiokafka.producer.sender: sender died (RuntimeError('Unexpected error during "
        "batch delivery') <- OSError('unknown error (-1)'))"
    )
    assert "Traceback (most recent call last):" in ours


def test_json_lines_carry_level_logger_and_message() -> None:
    record = logging.LogRecord("embedstream.engine.calls", logging.WARNING, __file__, 1,
                               "dead-lettered %s (%s)", ("id-7", "too_long"), None)  # fmt: skip
    doc = orjson.loads(JsonFormatter().format(record))
    assert doc["level"] == "warning"
    assert doc["logger"] == "embedstream.engine.calls"
    assert doc["message"] == "dead-lettered id-7 (too_long)"
    assert isinstance(doc["ts"], float)
    assert "suppressed" not in doc


def test_json_summaries_say_how_many_lines_they_stand_for(
    handler: SummarisingHandler, out: Collect, clock: FakeClock
) -> None:
    feed(handler, clock, HTTPX, HTTP_ARGS, [0, 1, 10_000])
    doc = orjson.loads(JsonFormatter().format(out.records[-1]))
    assert doc["suppressed"] == 2


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logging.getLogger("aiokafka").level
    yield root
    root.handlers[:], level, aiokafka_level = saved
    root.setLevel(level)
    logging.getLogger("aiokafka").setLevel(aiokafka_level)


@pytest.mark.parametrize("fmt", ["plain", "json"])
@pytest.mark.parametrize("level", ["debug", "info"])
def test_setup_installs_one_handler(root: logging.Logger, fmt: str, level: str) -> None:
    setup_logging(level, fmt)
    [handler] = root.handlers
    # DEBUG shows everything; above it, lines go through the summariser.
    assert isinstance(handler, SummarisingHandler) == (level == "info")
    stream = handler.target if isinstance(handler, SummarisingHandler) else handler
    assert isinstance(stream.formatter, JsonFormatter) == (fmt == "json")
    assert logging.getLogger("aiokafka").level == logging.WARNING  # its chatter stays out


def test_discard_summaries_forgets_held_lines(root: logging.Logger, clock: FakeClock) -> None:
    setup_logging("info", "plain", clock=clock)
    [handler] = root.handlers
    assert isinstance(handler, SummarisingHandler)
    out = Collect()
    handler.target = out
    logging.getLogger("aiokafka.client").error("Unable connect to node with id %s: %s", 1, "x")
    discard_summaries()
    handler.close()
    assert out.records == []


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_secrets_and_url_passwords_are_masked_in_every_line(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("info", fmt, secrets=["canary-sasl-pw", "sk-canary"])
        log = logging.getLogger("httpx")
        log.info('HTTP Request: POST %s "200 OK"', "http://gw:canary-url@h:1/v1/embeddings")
        log.info("auth with %s and %s", "canary-sasl-pw", "Bearer sk-canary")
        try:
            raise RuntimeError("key sk-canary refused")
        except RuntimeError:
            log.exception("failed")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    err = capsys.readouterr().err
    assert "canary" not in err
    assert "http://gw:***@h:1/v1/embeddings" in err
    assert "RuntimeError" in err  # the traceback is kept, only the secret masked
