#!/usr/bin/env bash
# Probe call: wo through the down kernel (probe/mla_wo: 4 splits of K, probe/mla_wo8: 8) against the bundled mla_decode, then the GPU tests
# with the probe's files in the bundled folder (on the device's copy only): the split plan is common to both.
set -o pipefail
source bench/gpu_env.sh || exit 1
start=$(date +%s); LIMIT=${LIMIT_S:-580}
left() { echo $(( LIMIT - ($(date +%s) - start) )); }
echo "== compare"; timeout 150 python3 -m kbench compare submissions/mla_decode probe/mla_wo --task mla_decode --suite decode --wide --json $OUT/ab_compare.json 2>&1 | tail -25
echo "== eval (host columns), $(left) s left"; timeout 150 python3 -m kbench eval submissions/mla_decode probe/mla_wo probe/mla_wo8 --task mla_decode --suite decode --baseline none --wide -q --json $OUT/ab_eval.json 2>&1 | tail -25
cp probe/mla_wo/*.py submissions/mla_decode/
echo "== gpu tests (wo variant), $(left) s left"; TESTS_LIMIT_S=$(( $(left) - 5 )) bash bench/gpu_tests.sh
