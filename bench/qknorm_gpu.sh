#!/usr/bin/env bash
# One device call: kbench on the qknorm suites, results under $OUT. Usage: bash bench/qknorm_gpu.sh [suites...]
set -o pipefail
source bench/gpu_env.sh || exit 1
for suite in "${@:-quick full}"; do
  for s in $suite; do
    python3 -m kbench eval submissions/qknorm --suite "$s" --json "$OUT/qknorm-$s.json" 2>&1 | tee "$OUT/qknorm-$s.log"
  done
done
