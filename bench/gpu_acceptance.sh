#!/usr/bin/env bash
# The GPU acceptance run (bench/gpu_acceptance.py says what it checks). On the device host:
#   bash bench/gpu_acceptance.sh [--tasks qknorm] [--suites quick,full] [--runs 3] [--skip-tests]
# It takes ~550-650 s, past one device call's limit: split it in two calls, --skip-tests, then --tasks ""
# (the GPU tests alone).
# Logs and JSON go to $OUT/acceptance.tgz, the table to $OUT/acceptance.txt.
set -o pipefail
source bench/gpu_env.sh || exit 1
WORK=/tmp/acceptance
rm -rf "$WORK"; mkdir -p "$WORK"
timeout "${ACCEPT_LIMIT_S:-560}" python3 bench/gpu_acceptance.py --out "$WORK" "$@" 2>&1 | tee "$WORK/driver.log"
code=$?
NAME=${ACCEPT_NAME:-acceptance}
cp "$WORK/acceptance.txt" "$OUT/$NAME.txt" 2>/dev/null
tar czf "$OUT/$NAME.tgz" -C "$WORK" .
exit $code
