"""The test tiers: ``unit`` (pure and fake-driven, no subprocess), ``integration`` (real
servers: Kafka, Redis, Prometheus, PostgreSQL) and ``e2e`` (processes, terminals, chaos).

The real servers' fixtures live in :mod:`tests.fixtures`; they skip (or fail, under
``EMBEDSTREAM_REQUIRE_BROKER=1``) when a server is missing, so the unit tier needs none.
"""

from __future__ import annotations

pytest_plugins = ["tests.fixtures"]
