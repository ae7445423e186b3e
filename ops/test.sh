#!/usr/bin/env bash
# The whole test suite on a fresh machine: install the test dependencies, start Apache Kafka
# (KRaft, loopback, jars from Maven Central, cached; Kafka Connect's too) and the Debian
# packages below, lint, type-check, check the layers, build the documentation site, run the
# three tiers of pytest, stop Kafka.
#
#   bash ops/test.sh              everything (the CI command)
#   bash ops/test.sh --fast       lint, types, contracts, the docs, the unit tier: no servers, ~2 min
#   bash ops/test.sh PYTEST-ARGS  the servers, then pytest with these arguments only
#                                 (e.g. `bash ops/test.sh tests/integration/test_cache.py -x`)
#
# Tiers run in parallel workers (pytest-xdist; every test has its own topic prefix and ports):
# unit and integration together, then e2e (processes, chaos) with three workers while the
# static checks run beside it: its tests mostly wait on feeders, restarts and outages.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
WORKERS="${EMBEDSTREAM_TEST_WORKERS:-4}"
E2E_WORKERS="${EMBEDSTREAM_TEST_E2E_WORKERS:-3}"
fast=0
if [[ "${1:-}" == "--fast" ]]; then
  fast=1
  shift
fi

static_checks() {
  # Every check runs, so one failing does not hide the next one's finding.
  local failed=0
  "$PYTHON" -m ruff check . || failed=1
  "$PYTHON" -m ruff format --check . || failed=1
  "$PYTHON" -m mypy || failed=1
  # The layers' contracts (pyproject [tool.importlinter]): core pure, one importer per library.
  "$PYTHON" -c "from importlinter.cli import lint_imports_command; lint_imports_command()" \
    --no-cache || failed=1
  # The documentation site (mkdocs.yml): a broken link or anchor, a missing page or a page
  # left out of the navigation fails. Into site/ (git-ignored); nothing fetched while building.
  NO_MKDOCS_2_WARNING=1 "$PYTHON" -m mkdocs build --strict --quiet || failed=1
  return $failed
}

if ((fast)); then
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[dev]'
  static_checks
  exec "$PYTHON" -m pytest -p no:cacheprovider -n "$WORKERS" tests/unit "$@"
fi
# Debian packages the tests use (command:package): promtool and prometheus (alert-rule tests,
# a real scrape), openssl (the secured broker's throwaway CA and certificates,
# tests/integration/secured.py), tmux (`embedstream top` in a terminal of a chosen size),
# redis-server (the embedding cache's tests start their own, on free loopback ports), curl,
# node and npm (the online lane's real clients: tests/e2e/test_real_clients.py installs Node's
# `openai` from npm into a cache folder at test time).
needed=()
for pair in promtool:prometheus prometheus:prometheus openssl:openssl tmux:tmux \
  redis-server:redis-server curl:curl node:nodejs npm:npm; do
  command -v "${pair%%:*}" >/dev/null || needed+=("${pair##*:}")
done
if ((${#needed[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${needed[@]}" >/dev/null
  else
    echo "ops/test.sh: install Debian's packages first: ${needed[*]}" >&2
    exit 1
  fi
fi
"$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[dev]'

export EMBEDSTREAM_KAFKA_PORT="${EMBEDSTREAM_KAFKA_PORT:-39092}"
export EMBEDSTREAM_PYTHON="$PYTHON"
bash ops/kafka/kafka.sh start
trap 'bash ops/kafka/kafka.sh stop >/dev/null 2>&1 || true' EXIT
# Kafka Connect and the Debezium JDBC sink (the chunk changelog's e2e test), cached like Kafka.
bash ops/kafka/connect.sh fetch
export EMBEDSTREAM_TEST_BOOTSTRAP="127.0.0.1:$EMBEDSTREAM_KAFKA_PORT"
# Integration tests fail (not skip) when the broker is missing: CI must not go green without it.
# The secured broker (TLS/SASL tests) is started by its pytest fixture, on free ports.
export EMBEDSTREAM_REQUIRE_BROKER=1 EMBEDSTREAM_REQUIRE_TOOLS=1

status=0
# Each pytest run's output is also kept, so that its failures can be printed again at the end.
pytest_log="$(mktemp)"
if (($#)); then
  static_checks
  "$PYTHON" -m pytest -p no:cacheprovider "$@" 2>&1 | tee -a "$pytest_log" || status=$?
else
  "$PYTHON" -m pytest -p no:cacheprovider -n "$WORKERS" --dist loadgroup --durations=15 tests/unit tests/integration \
    2>&1 | tee -a "$pytest_log" || status=$?
  # The e2e tier mostly waits (feeders at fixed rates, restarts, outages): the static checks
  # run beside it rather than before everything (their output is printed once they end).
  static_log="$(mktemp)"
  static_checks >"$static_log" 2>&1 &
  static_pid=$!
  "$PYTHON" -m pytest -p no:cacheprovider -n "$E2E_WORKERS" --dist loadgroup --durations=15 tests/e2e 2>&1 \
    | tee -a "$pytest_log" || status=$?
  wait "$static_pid" || status=$?
  cat "$static_log" | tee -a "$pytest_log"
  rm -f "$static_log"
fi
if [[ $status -ne 0 ]]; then
  echo "---- tests failed (exit $status); tail of the Kafka broker log ----" >&2
  bash ops/kafka/kafka.sh log 2>/dev/null | tail -n 150 >&2 || true
  # What failed goes last: a CI log is read from its end, and the broker's log is long.
  echo "---- what failed (the pytest summaries and checks above) ----" >&2
  grep -hE '^(FAILED|ERROR) |^=+ .*(failed|error).* =+$|: error: |^Found [0-9]+ error|BROKEN' "$pytest_log" >&2 || true
fi
rm -f "$pytest_log"
exit $status
