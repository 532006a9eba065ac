#!/usr/bin/env bash
# One device call for the record: qknorm full, repeatability (each task's quick suite twice,
# compared), then the GPU tests. Each step is time-boxed so the call ends inside its limit.
set -o pipefail
source bench/gpu_env.sh || exit 1
K="python3 -m kbench"
step() { local t=$1; shift; echo "== $*"; timeout "$t" "$@" 2>&1 | grep -v '^---' | tee -a "$OUT/final.log"; }
step 120 $K eval submissions/qknorm --suite full --json "$OUT/qknorm-full.json" -q
for i in 1 2; do step 60 $K eval submissions/qknorm --suite quick --budget 1 --json "$OUT/qknorm-quick-$i.json" -q; done
step 20 $K compare "$OUT/qknorm-quick-1.json" "$OUT/qknorm-quick-2.json"
for i in 1 2; do step 90 $K eval submissions/block_sparse_attn --suite quick --budget 1 --json "$OUT/bsa-quick-$i.json" -q; done
step 20 $K compare "$OUT/bsa-quick-1.json" "$OUT/bsa-quick-2.json"
for i in 1 2; do step 100 $K eval submissions/mla_decode --suite quick --budget 1 --json "$OUT/mla-quick-$i.json" -q; done
step 20 $K compare "$OUT/mla-quick-1.json" "$OUT/mla-quick-2.json"
echo "== GPU tests"; timeout "${TESTS_S:-150}" python3 -m pytest -q -m gpu -x tests 2>&1 | tail -15 | tee -a "$OUT/final.log"
