#!/usr/bin/env bash
# One device call for the record: qknorm full, repeatability (quick suites twice, compared),
# then GPU tests. Each step is time-boxed so the call ends inside its limit.
set -o pipefail
source bench/gpu_env.sh || exit 1
K="python3 -m kbench"
step() { local t=$1; shift; echo "== $*" | tee -a "$OUT/final.log"; timeout "$t" "$@" 2>&1 | grep -v '^---' | tee -a "$OUT/final.log"; }
step 110 $K eval submissions/qknorm --suite full --json "$OUT/qknorm-full.json" -q
for i in 1 2; do step 50 $K eval submissions/qknorm --suite quick --budget 0.5 --json "$OUT/qknorm-quick-$i.json" -q; done
step 15 $K compare "$OUT/qknorm-quick-1.json" "$OUT/qknorm-quick-2.json"
for i in 1 2; do step 75 $K eval submissions/block_sparse_attn --suite quick --budget 0.5 --json "$OUT/bsa-quick-$i.json" -q; done
step 15 $K compare "$OUT/bsa-quick-1.json" "$OUT/bsa-quick-2.json"
step 170 python3 -m pytest -q -x tests/test_qknorm_gpu.py tests/test_hostile_gpu.py
