#!/usr/bin/env bash
# Call B: the GPU tests, then the full runs docs/results.md is made from.
source bench/gpu_env.sh || exit 1
T0=$SECONDS; KB="python3 -m kbench"; mkdir -p $OUT/runs
timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ 2>&1 | tail -6; echo "gpu tests $((SECONDS-T0)) s"
for r in "qknorm full flashinfer" "mla_decode full flashinfer" "mla_decode decode flashinfer" "block_sparse_attn full flex_attention"; do
  set -- $r
  timeout 100 $KB eval submissions/$1 --suite $2 --baseline $3 --json $OUT/runs/$1-$2.json > $OUT/runs/$1-$2.log 2>&1
  echo "$1 $2 rc $? $((SECONDS-T0)) s"; grep -E "geomean|score" $OUT/runs/$1-$2.log | head -3
done
