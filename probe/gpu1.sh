# Set up here first (from the repository root, at the commit after this probe's):
#   git show PROBE:probe/mla-pending.patch | git apply; git show PROBE:probe/kbench_head.tar > /tmp/h.tar
#   mkdir -p probe/mla_prev && for f in submission.py mla_decode_gluon.py mla_launch.py; do
#     git show HEAD:submissions/mla_decode/$f > probe/mla_prev/$f; done
# kbench_head.tar: kbench/{cli/main,run/runner,run/workers,scaleout/gpus,interrupts}.py of b18625a,
# the spawning harness, for the start-up comparison.
# Workers forked from a torch-preloaded server: a GPU smoke against the spawning harness (HEAD's
# files) first, the spawning one put back if it fails; then mla_decode's pending change: its GPU
# tests and kbench compare against the previous kernel.
source bench/gpu_env.sh >/dev/null 2>&1 || { echo "gpu_env failed"; exit 1; }
set -o pipefail
mkdir -p /tmp/old && cp -r kbench /tmp/old/ && tar xf probe/kbench_head.tar -C /tmp/old
smoke() {  # label, PYTHONPATH
  local t0=$(date +%s.%N)
  PYTHONPATH=$2 timeout 100 python -m kbench eval submissions/qknorm --suite ${SMOKE_SUITE:-quick} ${SMOKE_ARGS} -q --json $OUT/smoke-$1.json > $OUT/smoke-$1.log 2>&1
  local rc=$? t1=$(date +%s.%N)
  python - $OUT/smoke-$1.json $1 "$t0 $t1" $rc <<'PY'
import json, sys
try:
    run = json.load(open(sys.argv[1]))
except Exception as exc:
    print(sys.argv[2], "no JSON:", exc, "rc", sys.argv[4]); sys.exit(1)
st = [c["status"] for c in run["cases"]]
t0, t1 = map(float, sys.argv[3].split())
print(sys.argv[2], "wall %.1f s" % (t1 - t0), "rc", sys.argv[4], "passed", st.count("passed"), "/", len(st), "geomean", run["summary"].get("geomean_speedup"))
print("  startup", json.dumps(run.get("wall", {}).get("startup"))[:600])
sys.exit(0 if st and st.count("passed") == len(st) else 1)
PY
}
if ! smoke fork /tmp/site:$PWD; then echo "FORK SMOKE FAILED"; tail -20 $OUT/smoke-fork.log; tar xf probe/kbench_head.tar; fi
timeout 90 python -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_decode 2>&1 | tee $OUT/tests.log | tail -3
for s in decode quick; do
  timeout 110 python -m kbench compare probe/mla_prev submissions/mla_decode --task mla_decode --suite $s -q \
    --json $OUT/cmp-$s.json 2>&1 | tee $OUT/cmp-$s.log | tail -12
done
