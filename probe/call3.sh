#!/usr/bin/env bash
# Probe call: the lean call against its CUDA-graph replay (probe/mla_graph, constant context) in the
# original's loop (bench/mla_decode_native.py); both targets' device time is the same kernels'.
set -o pipefail
source bench/gpu_env.sh || exit 1
start=$(date +%s); LIMIT=${LIMIT_S:-580}
left() { echo $(( LIMIT - ($(date +%s) - start) )); }
for sub in submissions/mla_decode probe/mla_graph; do
  n=$(basename $sub)
  echo "== $sub decode, $(left) s left"; timeout 120 python3 bench/mla_decode_native.py --suite decode --baseline none --submission $sub --out $OUT/$n-decode 2>&1 | tail -8
  echo "== $sub full, $(left) s left"; timeout 150 python3 bench/mla_decode_native.py --suite full --cases prefill128,prefill1024,prefill2048 --baseline none --submission $sub --out $OUT/$n-full 2>&1 | tail -8
done
