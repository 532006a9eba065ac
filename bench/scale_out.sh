#!/usr/bin/env bash
# The scale-out figures (docs/scale-out.md). On the device host:
#   source bench/gpu_env.sh && bash bench/scale_out.sh [all|1]
# all (2+ GPUs): 4 qknorm submissions ranked on the quick suite in a plain one-GPU run and with
#   --gpus all, then a run whose child on GPU 1 is killed mid-run (its cases go to GPU 0).
# 1 (one GPU): 2 submissions, the plain run against --gpus 1 (the child path on the same card),
#   then a child killed mid-run with no other GPU: its cases are lost, exit 3.
# SCALE_OUT_ARGS: more options for both ranking runs and the fault run (e.g. "--pool 4").
# Logs and JSON go to $OUT/scale_out.tgz, the comparison to $OUT/scale_out.txt.
set -o pipefail
GPUS=${1:-all}
EXTRA=${SCALE_OUT_ARGS:-}
W=/tmp/scale_out; rm -rf "$W"; mkdir -p "$W"
KB="python3 -m kbench"
SUBS="submissions/qknorm tests/fixtures/honest/qknorm/triton_plain tests/fixtures/honest/qknorm/torch_eager tests/fixtures/qknorm/good_torch"
[ "$GPUS" = 1 ] && SUBS="submissions/qknorm tests/fixtures/honest/qknorm/triton_plain"
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader | tee "$W/gpus.txt"
timed() {  # name, then the command: its wall seconds to $W/name.wall, its output to $W/name.log
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@" > "$W/$name.log" 2>&1; echo "exit $?" >> "$W/$name.log"
  python3 -c "print(round($(date +%s.%N) - $t0, 1))" > "$W/$name.wall"
  echo "$name: $(cat "$W/$name.wall") s, $(tail -1 "$W/$name.log")"
}
# Warm the host's caches (flashinfer's JIT modules, bytecode) so neither measured run pays for them.
timed warmup $KB eval submissions/qknorm --suite quick --case kv8_q32_d128_b1
timed plain  $KB eval $SUBS --suite quick $EXTRA --json "$W/plain.json"
timed scaled $KB eval $SUBS --suite quick $EXTRA --gpus "$GPUS" --json "$W/scaled.json"
if [ "$SECONDS" -gt 280 ]; then echo "no time left for the fault run"; else
  # Fault: the last child killed mid-unit.
  FAULT_SUBS="submissions/qknorm tests/fixtures/qknorm/good_torch"
  [ "$GPUS" = 1 ] && FAULT_SUBS="submissions/qknorm"
  ( $KB eval $FAULT_SUBS --suite quick $EXTRA --gpus "$GPUS" --json "$W/fault.json" > "$W/fault.log" 2>&1
    echo "exit $?" >> "$W/fault.log" ) &
  runner=$!
  for _ in $(seq 600); do
    kpid=$(pgrep -P "$runner" -f "kbench eval" | head -1)
    child=$( [ -n "$kpid" ] && pgrep -P "$kpid" -f "kbench.scaleout.gpus cuda" | tail -1 )
    # mid-unit: once the child has its workers (its own children), 3 s into the unit
    [ -n "$child" ] && [ -n "$(pgrep -P "$child" | head -1)" ] && sleep 3 && kill -9 "$child" \
      && echo "killed child $child 3 s after its first worker started" && break
    sleep 0.2
  done
  wait "$runner"; echo "fault: $(tail -1 "$W/fault.log")"; tail -4 "$W/fault.log"
fi
python3 bench/scale_out_compare.py "$W" "${KBENCH_COMMIT:-unknown}" | tee "$W/scale_out.txt"
cp "$W/scale_out.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/scale_out.tgz" -C "$W" .
