#!/usr/bin/env bash
# The GPU tests on the device host (honest corpus, hostile corpus, task GPU tests), time-boxed;
# the log (with the 20 slowest tests' times) goes to $OUT/gpu-tests.log.
set -o pipefail
source bench/gpu_env.sh || exit 1
timeout "${TESTS_LIMIT_S:-400}" python3 -m pytest -q -p no:cacheprovider -m gpu -rA --durations=20 tests/ 2>&1 \
  | grep -v "^  " | tee "$OUT/gpu-tests.log" | grep -E "PASS|FAIL|ERROR|passed|failed|^E " | tail -60
