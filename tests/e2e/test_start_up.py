"""What a process pays to start: the libraries of paths it does not take stay unimported.

The openai SDK (about 2 s of imports on this machine) serves only the SDK path (`sdk`, Azure
AD, credentials in the URL); redis-py (which pulls in OpenTelemetry's SDK) only `cache=redis`.
Every `embedstream run` start, restart and command pays for what it imports, so a processor
on the defaults must import neither. A fresh interpreter is the only honest place to look.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

STREAM = Path(__file__).resolve().parents[2] / "stream"
PROBE = """
import sys
sys.path.insert(0, {stream!r})
{imports}
import orjson
print(orjson.dumps({{m: m in sys.modules for m in {modules!r}}}).decode())
"""
LAZY = ["openai", "redis", "httpx", "opentelemetry.sdk"]


def _loaded(imports: str) -> dict[str, bool]:
    code = PROBE.format(stream=str(STREAM), imports=imports, modules=LAZY)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    loaded: dict[str, bool] = orjson.loads(out.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "imports",
    [
        "import embedstream.app.processor",
        "import embedstream.cli.commands",
        "from embedstream.engine.client import BatchingClient",
    ],
)
def test_the_default_path_imports_no_sdk_and_no_redis(imports: str) -> None:
    assert _loaded(imports) == dict.fromkeys(LAZY, False)


def test_the_sdk_path_and_the_redis_tier_still_import_their_libraries() -> None:
    """The probe can tell: building what needs them imports them."""
    imports = (
        "from embedstream.engine.embedder import OpenAIEmbedder\n"
        "from embedstream.engine.cache_tiers import RedisTier\n"
        "OpenAIEmbedder(base_url='http://127.0.0.1:9/v1', api_key=None, timeout_s=1, sdk=True)\n"
        "RedisTier('redis://127.0.0.1:9/0', ttl_s=0, timeout_s=0.1)"
    )
    loaded = _loaded(imports)
    assert loaded["openai"] and loaded["redis"], loaded
