"""The `embedstream` command line against a real broker: fail-fast config, produce, consume."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import orjson
import pytest
from embedstream.kafka.client.admin import topic_names

from tests.e2e.cli import embedstream
from tests.integration.helpers import (
    create_all_topics,
    group_offsets,
    publish,
    read_topic,
    request,
    settings_for,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("args", "setting"),
    [
        (["--bootstrap-servers", "127.0.0.1:1", "--connect-timeout-s", "2"], "bootstrap_servers"),
        (["--model", ""], "model"),
        (["--max-batch-size", "-5"], "max_batch_size"),
        (["--max-wait-ms", "-1"], "max_wait_ms"),
        (["--max-concurrency", "0"], "max_concurrency"),
    ],
)
async def test_bad_configuration_fails_at_start_naming_the_setting(
    bootstrap: str, unique_prefix: str, args: list[str], setting: str
) -> None:
    settings = settings_for(bootstrap, unique_prefix, "http://127.0.0.1:9/v1")
    await create_all_topics(settings)
    names = topic_names(unique_prefix)
    await publish(bootstrap, names.requests_low, [request("a", "some text")])
    group = unique_prefix + "bad"
    code, _, err = await embedstream(
        "run",
        "--bootstrap-servers",
        bootstrap,
        "--topic-prefix",
        unique_prefix,
        "--group-id",
        group,
        "--metrics-port",
        "0",
        *args,
    )
    assert code == 2
    assert f"setting {setting} (EMBEDSTREAM_{setting.upper()})" in err
    # Nothing was consumed: the group never committed anything.
    assert await group_offsets(bootstrap, group) == {}


async def test_produce_then_consume_round_trip(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    settings = settings_for(bootstrap, unique_prefix, "http://127.0.0.1:9/v1")
    await create_all_topics(settings)
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix]
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"id": "j1", "text": "json line"}\n\n{"id": "j2", "text": "two"}\n')
    code, _, err = await embedstream("produce", str(lines), "--priority", "high", *common)
    assert code == 0, err
    assert "sent 2 requests" in err
    code, _, err = await embedstream(
        "produce", "--plain", "--quiet", *common, stdin=b"first text\nsecond text\n"
    )
    assert code == 0, err
    # Requests are not results; consume reads what the results topic holds: write two there.
    names = topic_names(unique_prefix)
    await publish(bootstrap, names.results, [(b"r", b'{"id": "r", "embedding": [1.0]}')])
    code, out, err = await embedstream(
        "consume", "--from-beginning", "--limit", "1", *common, limit_s=60
    )
    assert code == 0, err
    assert [orjson.loads(line) for line in out.splitlines()] == [{"id": "r", "embedding": [1.0]}]
    high = await read_topic(bootstrap, names.requests_high, idle_s=0.2)
    low = await read_topic(bootstrap, names.requests_low, idle_s=0.2)
    assert sorted(orjson.loads(r.value)["id"] for r in high) == ["j1", "j2"]
    assert sorted(orjson.loads(r.value)["text"] for r in low) == ["first text", "second text"]
    assert all(r.key == orjson.loads(r.value)["id"].encode() for r in high + low)


async def test_topics_create_twice_is_a_no_op(bootstrap: str, unique_prefix: str) -> None:
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix]
    code, out, _ = await embedstream("topics", "create", *common)
    assert code == 0 and "6 created" in out
    code, out, _ = await embedstream("topics", "create", *common)
    assert code == 0 and "0 created, 6 already existed" in out
    code, out, _ = await embedstream("topics", "list", *common)
    assert sorted(out.split()) == sorted(
        unique_prefix + n
        for n in ("requests.high", "requests.low", "retry", "results", "dlq", "batch.jobs")
    )


async def test_sigterm_drains_commits_and_exits_zero(bootstrap: str, unique_prefix: str) -> None:
    from embedsim.server import SimulatorServer

    from tests.integration.helpers import committed_lag, wait_for_ids

    async with SimulatorServer() as simulator:
        settings = settings_for(bootstrap, unique_prefix, simulator.url)
        await create_all_topics(settings)
        names = topic_names(unique_prefix)
        ids = [f"s{i}" for i in range(300)]
        await publish(bootstrap, names.requests_low, [request(i, f"text {i}") for i in ids])
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", "run",
            "--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix,
            "--group-id", settings.group_id, "--base-url", simulator.url, "--metrics-port", "0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=90)
            assert set(seen) == set(ids)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert "stopped cleanly" in err.decode()
        lag = await committed_lag(bootstrap, settings.group_id, [names.requests_low])
        assert lag == {names.requests_low: 0}


async def test_consume_on_a_missing_topic_is_one_line(bootstrap: str, unique_prefix: str) -> None:
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix]
    code, out, err = await embedstream("consume", "--limit", "1", *common, limit_s=60)
    assert code == 2, err
    assert "Traceback" not in err and out == ""
    [line] = err.splitlines()
    assert line == (
        f"embedstream: error: setting topic_prefix (EMBEDSTREAM_TOPIC_PREFIX): topic "
        f"{unique_prefix}results does not exist at {bootstrap}; create the topics with "
        "`embedstream topics create` (or check the prefix)"
    )


@pytest.mark.parametrize(
    ("args", "stdin", "missing"),
    [
        (["produce", "--plain"], b"a text\n", ["requests.low"]),
        (["produce", "--priority", "high"], b'{"id": "a", "text": "b"}\n', ["requests.high"]),
        (["verify"], b"", ["requests.high", "requests.low", "results", "dlq"]),
    ],
)
async def test_produce_and_verify_on_missing_topics_are_one_line(
    bootstrap: str, unique_prefix: str, args: list[str], stdin: bytes, missing: list[str]
) -> None:
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix]
    code, out, err = await embedstream(*args, *common, stdin=stdin, limit_s=60)
    assert code == 2, err
    assert "Traceback" not in err and out == ""
    [line] = err.splitlines()  # no aiokafka line per metadata refresh, no 40 s wait
    names = ", ".join(unique_prefix + name for name in missing)
    which = f"topic {names} does" if len(missing) == 1 else f"topics {names} do"
    assert line == (
        f"embedstream: error: setting topic_prefix (EMBEDSTREAM_TOPIC_PREFIX): {which} not "
        f"exist at {bootstrap}; create the topics with `embedstream topics create` "
        "(or check the prefix)"
    )


async def test_run_with_topics_missing_is_one_line_naming_them(
    bootstrap: str, unique_prefix: str
) -> None:
    """Without its topics, `run` looks for them for a few seconds, then says which are missing
    and what to do, once: no aiokafka line per metadata refresh, no traceback."""
    names = topic_names(unique_prefix)
    code, out, err = await embedstream(
        "run", "--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix,
        "--group-id", unique_prefix + "group", "--metrics-port", "0",
        "--base-url", "http://127.0.0.1:9/v1", limit_s=90,
    )  # fmt: skip
    assert code == 2, err
    assert "Traceback" not in err and out == ""
    [line] = err.splitlines()
    missing = ", ".join(
        [names.requests_high, names.requests_low, names.retry, names.results, names.dead_letters]
    )
    assert line == (
        f"embedstream: error: setting topic_prefix (EMBEDSTREAM_TOPIC_PREFIX): topics {missing} "
        f"do not exist at {bootstrap} (waited 5s); create the topics with "
        "`embedstream topics create` (or check the prefix)"
    )


async def test_run_on_a_taken_metrics_port_is_one_line_naming_the_setting(
    bootstrap: str, unique_prefix: str
) -> None:
    """Another process on the metrics port: one line naming metrics_port, no traceback and no
    client left unclosed behind it."""
    await create_all_topics(settings_for(bootstrap, unique_prefix, "http://127.0.0.1:9/v1"))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        code, out, err = await embedstream(
            "run", "--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix,
            "--group-id", unique_prefix + "group", "--metrics-port", str(port),
            "--base-url", "http://127.0.0.1:9/v1", "--log-level", "WARNING", limit_s=90,
        )  # fmt: skip
    finally:
        taken.close()
    assert code == 2 and out == "", err
    [line] = err.splitlines()
    assert line.startswith(
        f"embedstream: error: setting metrics_port (EMBEDSTREAM_METRICS_PORT): cannot listen on "
        f"127.0.0.1:{port}"
    ), err


async def wait_for_count(bootstrap: str, topic: str, count: int, *, timeout_s: float) -> int:
    """Records in ``topic`` once there are at least ``count`` (AssertionError on timeout)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        seen = len(await read_topic(bootstrap, topic, idle_s=0.2))
        if seen >= count:
            return seen
        assert loop.time() < deadline, f"{seen} of {count} records in {topic}"
        await asyncio.sleep(0.2)


async def test_produce_streams_a_pipe_and_logs_plain_progress_to_a_file(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    """Lines written to produce's stdin reach Kafka while the pipe is still open (nothing waits
    for the whole input); stderr to a file gets whole lines, no carriage returns; --ids-out
    maps every generated id to its text."""
    settings = settings_for(bootstrap, unique_prefix, "http://127.0.0.1:9/v1")
    await create_all_topics(settings)
    names = topic_names(unique_prefix)
    ids_out = tmp_path / "ids.tsv"
    with (tmp_path / "stderr.txt").open("wb") as err_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream", "produce", "--plain", "--ids-out", str(ids_out),
            "--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=err_file,
        )  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(b"".join(b"early text %d\n" % i for i in range(50)))
        await proc.stdin.drain()
        early = await wait_for_count(bootstrap, names.requests_low, 50, timeout_s=60)
        assert proc.returncode is None  # still reading: the pipe is open
        proc.stdin.write(b"late text\n")
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert early >= 50
    records = await read_topic(bootstrap, names.requests_low, idle_s=0.2)
    sent = {orjson.loads(r.value)["id"]: orjson.loads(r.value)["text"] for r in records}
    rows = dict(line.split("\t", 1) for line in ids_out.read_text().splitlines())
    assert rows == sent and len(rows) == 51
    err = (tmp_path / "stderr.txt").read_bytes()
    assert b"\r" not in err and b"\x1b" not in err
    assert err.decode().splitlines()[-1] == "sent 51 requests"
