#!/usr/bin/env bash
# Probe call: GPU tests at this commit, mla_decode decode for results.md, the native protocols' figures.
source bench/gpu_env.sh || exit 1
TESTS_LIMIT_S=300 bash bench/gpu_tests.sh 2>&1 | tail -8
timeout 100 python3 -m kbench eval submissions/mla_decode --suite decode --json $OUT/mla_decode-decode.json 2>&1 | tail -12
timeout 90 python3 bench/mla_decode_native.py --suite full --baseline none --out $OUT/mla_native 2>&1 | tail -12
timeout 90 python3 bench/block_sparse_attn_native.py --suites quick,full --baseline none --out $OUT/bsa_native 2>&1 | tail -16
