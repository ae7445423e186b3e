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
