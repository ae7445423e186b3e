"""The test tiers: ``unit`` (pure and fake-driven, no subprocess), ``integration`` (real
servers: Kafka, Redis, Prometheus, PostgreSQL) and ``e2e`` (processes, terminals, chaos).

The real servers' fixtures live in :mod:`tests.fixtures`; they skip (or fail, under
``EMBEDSTREAM_REQUIRE_BROKER=1``) when a server is missing, so the unit tier needs none.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures"]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a grouped test when `--dist loadgroup` did not group it: tests sharing a session
    fixture (the secured broker, the bench) would each start their own, on every worker, and
    the suite would take minutes longer without saying why (pytest-xdist#1386)."""
    if not item.config.getoption("loadgroup", default=False):
        return
    if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
        pytest.fail(
            "--dist loadgroup did not group this test: this pytest and pytest-xdist do not "
            "work together (pytest-xdist#1386); see the pytest pin in pyproject's dev extra",
            pytrace=False,
        )
