"""The Prometheus alert rules load and behave as their promtool unit tests say.

Needs `promtool` (Debian/Ubuntu package `prometheus`, or the Prometheus release tarball). Without
it these tests are skipped, unless EMBEDSTREAM_REQUIRE_TOOLS=1 (as in CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "ops" / "prometheus"
RULES = PROMETHEUS_DIR / "alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "alerts_test.yml"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"
TIMEOUT_S = 120


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") == "1":
            pytest.fail("EMBEDSTREAM_REQUIRE_TOOLS=1 but promtool is not on PATH")
        pytest.skip("promtool not installed (apt-get install prometheus, or a Prometheus release)")
    return path


def _run(*args: str) -> str:
    done = subprocess.run(
        [_promtool(), *args],
        cwd=PROMETHEUS_DIR,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def test_rules_are_valid() -> None:
    output = _run("check", "rules", RULES.name)
    assert "SUCCESS" in output


def test_config_is_valid() -> None:
    output = _run("check", "config", CONFIG.name)
    assert "SUCCESS" in output


def test_rule_unit_tests_pass() -> None:
    output = _run("test", "rules", RULE_TESTS.name)
    assert "SUCCESS" in output


def _rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    assert [g["name"] for g in groups] == ["embedstream"]
    rules: list[dict[str, object]] = groups[0]["rules"]
    return rules


def test_every_rule_is_complete() -> None:
    for rule in _rules():
        name = rule["alert"]
        assert rule.get("for"), name
        labels = rule["labels"]
        assert isinstance(labels, dict) and labels["severity"] in {"info", "warning", "critical"}
        annotations = rule["annotations"]
        assert isinstance(annotations, dict), name
        assert {"summary", "description", "runbook"} <= set(annotations), name


def test_every_rule_fires_once_and_stays_silent_once_in_the_unit_tests() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    assert tests["rule_files"] == [RULES.name]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {str(rule["alert"]) for rule in _rules()}
    assert names - fires == set(), "rules never shown firing"
    assert names - silent == set(), "rules never shown silent"
    expected = {
        "EmbedstreamQueueDepthHigh",
        "EmbedstreamItemWaitP99High",
        "EmbedstreamTimeFlushRatioHigh",
        "EmbedstreamLagGrowing",
        "EmbedstreamLagSecondsHigh",
        "EmbedstreamDeadLettersRate",
        "EmbedstreamProviderErrors",
        "EmbedstreamProviderAuthFailures",
        "EmbedstreamPartitionsPausedTooLong",
        "EmbedstreamBudgetStoreUnreachable",
        "EmbedstreamLaneProcessRestarting",
        "EmbedstreamNotReady",
        "EmbedstreamSourceTokensEstimated",
    }
    assert expected <= names
