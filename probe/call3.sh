#!/usr/bin/env bash
# Probe call: settle gaps and drains of the honest corpus, per call and process; a hostile side stream beside;
# then the corpora's and the worker's GPU tests on the drain check.
source bench/gpu_env.sh || exit 1
{ timeout 45 python3 probe/settle.py torch_eager,several_launches 1
  timeout 30 python3 probe/settle.py hostile:side_stream_slow 1; } 2>&1 | grep -v Warn | tee $OUT/settle.txt
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -rA tests/corpora tests/worker 2>&1 | grep -E "^(PASSED|FAILED|ERROR|E )|passed|failed" | tail -50
