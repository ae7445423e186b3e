"""Which settings each long-running command takes: `run` every one, `serve` the engine's and
the online lane's (no Kafka, nor documents, formats or the store)."""

from __future__ import annotations

from embedstream.settings.fields import FIELDS, spec
from embedstream.settings.types import Group

RUN_SETTINGS = tuple(FIELDS)
_SERVE_GROUPS = (Group.PROVIDER, Group.BATCHING, Group.LIMITS, Group.CACHE, Group.OPERATIONS)
SERVE_SETTINGS = tuple(
    name
    for name in FIELDS
    if (spec(name).group in _SERVE_GROUPS and name != "dimensions")  # Kafka's events only
    or (spec(name).group is Group.ONLINE and not name.startswith("online_"))
    or name in ("online_timeout_s", "max_attempts", "retry_backoff_base_ms",
                "retry_backoff_cap_ms", "drain_timeout_s")
    or spec(name).group is Group.TRACING
)  # fmt: skip
