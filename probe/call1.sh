#!/usr/bin/env bash
# Probe call: projection launch shapes at prefill128 (bs 128); the GPU tests and the decode precision check at HEAD.
source bench/gpu_env.sh || exit 1
timeout 200 python3 probe/mla_sweep.py prefill128 > $OUT/sweep128.log 2>&1
cat $OUT/sweep128.log
TESTS_LIMIT_S=220 bash bench/gpu_tests.sh | tail -5
timeout 120 python3 submissions/mla_decode/dev/mla_decode_precision.py --suite decode --device cuda --seeds 200 > $OUT/prec.log 2>&1
tail -20 $OUT/prec.log
