#!/usr/bin/env bash
# Probe call: drains and settle gaps of an honest eager call and of a hostile side stream, per call and
# process; then the honest corpus, the side-stream tests and the worker's GPU tests on the drain check.
source bench/gpu_env.sh || exit 1
{ timeout 22 python3 probe/settle.py torch_eager 1
  timeout 20 python3 probe/settle.py hostile:side_stream_slow 1; } 2>&1 | grep -v Warn | tee $OUT/settle.txt
timeout 95 python3 -m pytest -q -p no:cacheprovider -m gpu -rA tests/corpora/test_honest.py tests/worker \
  "tests/corpora/test_hostile.py::test_side_stream_work_past_the_timed_region_is_flagged" \
  "tests/corpora/test_hostile.py::test_a_side_stream_that_never_waits_on_the_callers_stream_fails" \
  2>&1 | grep -E "^(PASSED|FAILED|ERROR|E )|passed|failed" | tail -30
