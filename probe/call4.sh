#!/usr/bin/env bash
# Probe call, all in one: the GPU tests (wo variant in the bundled folder on the device's copy: the split
# plan is common to both), the wo A/B by kbench eval (compared offline), the graph replay in the original's loop.
set -o pipefail
source bench/gpu_env.sh || exit 1
start=$(date +%s); LIMIT=${LIMIT_S:-585}
left() { echo $(( LIMIT - ($(date +%s) - start) )); }
mkdir -p $OUT/bundled && cp submissions/mla_decode/*.py $OUT/bundled/ 2>/dev/null; mkdir -p /tmp/bundled && cp submissions/mla_decode/*.py /tmp/bundled/
echo "== eval A/B, $(left) s left"; timeout 170 python3 -m kbench eval /tmp/bundled probe/mla_wo probe/mla_wo8 --task mla_decode --suite decode --baseline none --wide -q --json $OUT/ab_eval.json 2>&1 | tail -30
cp probe/mla_wo/*.py submissions/mla_decode/
echo "== gpu tests (wo variant), $(left) s left"; TESTS_LIMIT_S=250 bash bench/gpu_tests.sh
for sub in /tmp/bundled probe/mla_graph; do
  l=$(( $(left) / 2 )); [ $l -lt 20 ] && break
  echo "== native $sub, $(left) s left"; timeout $l python3 bench/mla_decode_native.py --suite decode --baseline none --submission $sub --out $OUT/native-$(basename $sub) 2>&1 | tail -6
done
