#!/usr/bin/env bash
# A long fuzzing run of the intake and the retry-header reader (tests/unit/test_fuzz_intake.py):
# the same properties as CI with FUZZ_EXAMPLES examples each (default 200,000; about an hour
# per 100,000 on one core). A failure prints the smallest input found and a blob to replay it
# with @reproduce_failure.
#   bash ops/fuzz.sh                 # 200,000 examples per property
#   FUZZ_EXAMPLES=20000 bash ops/fuzz.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD/stream${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m pytest -p no:cacheprovider -p no:randomly -q --timeout=0 \
  --hypothesis-profile=fuzz --hypothesis-show-statistics tests/unit/test_fuzz_intake.py "$@"
