#!/usr/bin/env bash
# Probe call: the runs docs/results.md is written from (bench/results.py), then mla_decode's native loop on decode.
set -o pipefail
source bench/gpu_env.sh || exit 1
start=$(date +%s); LIMIT=${LIMIT_S:-585}
left() { echo $(( LIMIT - ($(date +%s) - start) )); }
mkdir -p $OUT/runs
ev() { local name=$1 lim=$2; shift 2; echo "== $name, $(left) s left"
  timeout $lim python3 -m kbench eval "$@" -q --wide --json $OUT/runs/$name.json > $OUT/runs/$name.txt 2>&1; echo "rc $?"; tail -16 $OUT/runs/$name.txt; }
ev mla_decode-full 150 submissions/mla_decode --suite full --baseline flashinfer
ev mla_decode-decode 80 submissions/mla_decode --suite decode --baseline flashinfer
ev qknorm-full 100 submissions/qknorm --suite full --baseline flashinfer
ev block_sparse_attn-full 120 submissions/block_sparse_attn --suite full --baseline flex_attention
l=$(( $(left) - 5 )); [ $l -gt 20 ] && { echo "== native decode, $(left) s left"; timeout $l python3 bench/mla_decode_native.py --suite decode --baseline none --out $OUT/native-decode 2>&1 | tail -6; }
