# One call, ~430 s at most: the forked workers on the GPU first (qknorm quick, the GPU tests of the
# worker, run and corpora), then mla_decode's pending change (its GPU tests, compare on quick).
source bench/gpu_env.sh >/dev/null 2>&1 || { echo "gpu_env failed"; exit 1; }
set -o pipefail
END=$(( $(date +%s) + ${BUDGET_S:-420} ))
left() { local l=$(( END - $(date +%s) )); [ $l -gt $1 ] && echo $1 || echo $(( l > 5 ? l : 5 )); }
t0=$(date +%s.%N)
timeout $(left 100) python -m kbench eval submissions/qknorm --suite quick -q --json $OUT/smoke-fork.json > $OUT/smoke-fork.log 2>&1
echo "smoke rc $? wall $(python -c "import time;print(round(time.time()-$t0,1))") s"; tail -32 $OUT/smoke-fork.log
python - $OUT/smoke-fork.json <<'PY'
import json, sys
try:
    run = json.load(open(sys.argv[1]))
except Exception as exc:
    print("no JSON", exc); sys.exit()
st = [c["status"] for c in run["cases"]]
print("passed", st.count("passed"), "/", len(st), "startup", json.dumps(run.get("wall", {}).get("startup"))[:400])
PY
timeout $(left 170) python -m pytest -q -p no:cacheprovider -m gpu -rfE --durations=8 tests/worker tests/run tests/corpora 2>&1 | tee $OUT/gpu-harness.log | grep -E "passed|failed|FAIL|ERROR|^[0-9.]+s " | tail -16
timeout $(left 80) python -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_decode 2>&1 | tee $OUT/mla-tests.log | tail -3
timeout $(left 200) python -m kbench compare probe/mla_prev submissions/mla_decode --task mla_decode --suite quick -q \
    --json $OUT/cmp-quick.json 2>&1 | tee $OUT/cmp-quick.log | tail -14
echo "left $(( END - $(date +%s) )) s"
