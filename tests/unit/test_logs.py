from __future__ import annotations

import logging

import orjson
import pytest
from embedstream.ops.logs import JsonFormatter, setup_logging


def test_json_lines_carry_level_logger_and_message() -> None:
    record = logging.LogRecord("embedstream.engine.calls", logging.WARNING, __file__, 1,
                               "dead-lettered %s (%s)", ("id-7", "too_long"), None)  # fmt: skip
    doc = orjson.loads(JsonFormatter().format(record))
    assert doc["level"] == "warning"
    assert doc["logger"] == "embedstream.engine.calls"
    assert doc["message"] == "dead-lettered id-7 (too_long)"
    assert isinstance(doc["ts"], float)


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_setup_installs_one_handler(fmt: str) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("debug", fmt)
        assert len(root.handlers) == 1
        assert isinstance(root.handlers[0].formatter, JsonFormatter) == (fmt == "json")
        assert logging.getLogger("aiokafka").level == logging.WARNING  # its chatter stays out
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
