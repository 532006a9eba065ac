# The GPU corpora on the forked workers; mla_decode's figures (kbench, then GPU MODE's protocol).
source bench/gpu_env.sh >/dev/null 2>&1 || { echo "gpu_env failed"; exit 1; }
set -o pipefail
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -rfE tests/corpora tests/worker 2>&1 | tee $OUT/gpu-corpora.log | grep -E "passed|failed|FAIL|ERROR" | tail -12
timeout 170 python -m kbench eval submissions/mla_decode --suite full --baseline flashinfer -q --json $OUT/mla-full.json 2>&1 | tail -14
mkdir -p $OUT/native
timeout 110 python bench/mla_decode_native.py --suite full --out $OUT/native 2>&1 | tail -12
ls $OUT/native
