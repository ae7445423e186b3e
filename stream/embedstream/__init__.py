"""embedstream: Kafka text events in, embeddings out, with adaptive batching.

The public API for use as a library::

    from embedstream import BatchingClient

    async with BatchingClient(base_url="http://localhost:8700/v1") as client:
        vector = await client.embed("a search query")

Names are loaded on first use, so ``import embedstream`` (and the command line) stay light.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedstream.engine.client import BatchingClient
    from embedstream.errors import (
        ConfigError,
        EmbedStreamError,
        InvalidEvent,
        PermanentItemError,
        ProviderWideError,
        Reason,
        TransientError,
    )
    from embedstream.settings import Settings, load_settings
    from embedstream.wire import Vector

try:
    __version__ = version("embedstream")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    "BatchingClient": "embedstream.engine.client",
    "Vector": "embedstream.wire",
    "Settings": "embedstream.settings",
    "load_settings": "embedstream.settings",
    "EmbedStreamError": "embedstream.errors",
    "ConfigError": "embedstream.errors",
    "InvalidEvent": "embedstream.errors",
    "PermanentItemError": "embedstream.errors",
    "TransientError": "embedstream.errors",
    "ProviderWideError": "embedstream.errors",
    "Reason": "embedstream.errors",
}

__all__ = [
    "BatchingClient",
    "ConfigError",
    "EmbedStreamError",
    "InvalidEvent",
    "PermanentItemError",
    "ProviderWideError",
    "Reason",
    "Settings",
    "TransientError",
    "Vector",
    "__version__",
    "load_settings",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'embedstream' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
