#!/usr/bin/env bash
# Probe call: the one-loop down kernel (6 stages at bs 128) against the two-branch kernel (c24443e):
# mla GPU tests on the tree, kbench eval of both on full and decode, compare, then the launch-shape sweep.
source bench/gpu_env.sh || exit 1
O=probe/old/submission.py
rm -rf /tmp/mla_old && cp -r submissions/mla_decode /tmp/mla_old && cp $O /tmp/mla_old/submission.py
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_decode 2>&1 | tail -3
for s in full decode; do
  timeout 200 python3 -m kbench eval /tmp/mla_old submissions/mla_decode --task mla_decode --suite $s \
     --baseline none --wide --json $OUT/ab_$s.json 2>&1 | tail -30
  python3 -m kbench compare $OUT/ab_$s.json:/tmp/mla_old $OUT/ab_$s.json:submissions/mla_decode 2>&1 | tail -14
done
timeout 60 python3 probe/mla_sweep.py prefill128 --what down --old $O \
  --grid "64,64,4,8,5;64,64,4,8,6;64,64,4,8,8;64,128,4,8,3;64,128,4,8,4" 2>&1 | grep -v Warn
timeout 40 python3 probe/mla_sweep.py b16_ctx6144 --suite decode --what down,wo --old $O \
  --grid "64,64,8,4,6;64,64,8,4,8;64,128,8,4,4" 2>&1 | grep -v Warn
