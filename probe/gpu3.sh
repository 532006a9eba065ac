# qknorm and block_sparse_attn figures for docs/results.md; the GPU test suite.
source bench/gpu_env.sh >/dev/null 2>&1 || { echo "gpu_env failed"; exit 1; }
set -o pipefail
timeout 150 python -m kbench eval submissions/qknorm --suite full --baseline flashinfer -q --json $OUT/qknorm-full.json 2>&1 | tail -6
timeout 200 python -m kbench eval submissions/block_sparse_attn --suite full -q --json $OUT/block_sparse_attn-full.json 2>&1 | tail -6
TESTS_LIMIT_S=230 bash bench/gpu_tests.sh 2>&1 | tail -8
