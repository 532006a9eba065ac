#!/usr/bin/env bash
# Probe call: the honest corpus's settle gaps, per call and process, run after run; a hostile side stream beside.
source bench/gpu_env.sh || exit 1
{ timeout 140 python3 probe/settle.py torch_compile,torch_eager,several_launches,heavy_host_work 3
  timeout 40 python3 probe/settle.py hostile:side_stream_slow 1; } 2>&1 | grep -v Warn | tee $OUT/settle.txt
timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu tests/corpora/test_honest.py 2>&1 | tail -4
