#!/usr/bin/env bash
# Probe call: the down kernel with 128-wide column tiles (bs 128 and bs 16), then the acceptance run
# without its GPU tests.
source bench/gpu_env.sh || exit 1
timeout 100 python3 probe/mla_sweep.py prefill128 --what down \
  --grid "128,64,7,8,6;128,64,7,8,5;128,64,7,8,4;128,64,8,8,6;128,64,4,8,6;128,32,7,8,8;128,64,7,4,4;64,64,4,8,6" 2>&1 | grep -v Warn | tee $OUT/sweep128.txt
timeout 60 python3 probe/mla_sweep.py b16_ctx6144 --suite decode --what down \
  --grid "128,64,7,4,4;128,64,8,4,4;128,64,7,4,6;128,128,7,4,3;128,64,7,8,4" 2>&1 | grep -v Warn | tee $OUT/sweep16.txt
ACCEPT_LIMIT_S=440 bash bench/gpu_acceptance.sh --skip-tests 2>&1 | grep -E "PASS|FAIL|checks passed" | tail -60
