#!/usr/bin/env bash
# Probe call: the down kernel as one loop (one shared-memory ring) against the two-branch kernel, launch shapes.
source bench/gpu_env.sh || exit 1
O=probe/old/submission.py
timeout 150 python3 probe/mla_sweep.py prefill128 --what down --old $O \
  --grid "64,64,4,8,4;64,64,4,8,5;64,64,4,8,6;64,64,4,8,8;64,128,4,8,3;64,128,4,8,4;64,64,3,8,6;64,64,6,8,6" 2>&1 | grep -v Warn
timeout 100 python3 probe/mla_sweep.py b16_ctx6144 --suite decode --what down,wo --old $O \
  --grid "64,64,8,4,4;64,64,8,4,6;64,64,8,4,8;64,128,8,4,4;64,64,4,4,6;64,64,16,4,6" 2>&1 | grep -v Warn
timeout 80 python3 probe/mla_sweep.py b1_ctx8191 --suite decode --what down --old $O \
  --grid "64,64,8,4,4;64,64,8,4,6;64,64,8,4,8;64,128,8,4,4;64,64,16,4,6" 2>&1 | grep -v Warn
