#!/usr/bin/env bash
# Probe call: projection launch shapes at prefill128 (bs 128) and b16_ctx6144, and the parts breakdown.
source bench/gpu_env.sh || exit 1
timeout 240 python3 probe/mla_sweep.py prefill128 > $OUT/sweep128.log 2>&1
timeout 120 python3 probe/mla_sweep.py b16_ctx6144 --suite decode --what down,wo,qup > $OUT/sweep16.log 2>&1
timeout 60 python3 submissions/mla_decode/dev/mla_decode_parts.py --suite full --case prefill128 --calls 15 > $OUT/parts128.log 2>&1
timeout 60 python3 submissions/mla_decode/dev/mla_decode_parts.py --suite full --case prefill2048 --calls 15 > $OUT/parts2048.log 2>&1
tail -n 100 $OUT/*.log
