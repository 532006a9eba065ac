#!/usr/bin/env bash
# The scale-out figures (docs/scale-out.md): 4 qknorm submissions ranked on the quick suite on
# one GPU (a plain run) and with --gpus all, then a child killed mid-run. On the device host:
#   source bench/gpu_env.sh && bash bench/scale_out.sh
# Logs and JSON go to $OUT/scale_out.tgz, the comparison to $OUT/scale_out.txt.
set -o pipefail
W=/tmp/scale_out; rm -rf "$W"; mkdir -p "$W"
SUBS="submissions/qknorm tests/fixtures/honest/qknorm/triton_plain tests/fixtures/honest/qknorm/torch_eager tests/fixtures/qknorm/good_torch"
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader | tee "$W/gpus.txt"
git_commit=${KBENCH_COMMIT:-unknown}
timed() {  # name, then the command: its wall seconds to $W/name.wall, its output to $W/name.log
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@" > "$W/$name.log" 2>&1; echo "exit $?" >> "$W/$name.log"
  python3 -c "print(round($(date +%s.%N) - $t0, 1))" > "$W/$name.wall"
  echo "$name: $(cat "$W/$name.wall") s, $(tail -1 "$W/$name.log")"
}
# Warm the host's caches (flashinfer's JIT modules, bytecode) so neither measured run pays for them.
timed warmup kbench eval submissions/qknorm --suite quick --case kv8_q32_d128_b1
timed one_gpu  kbench eval $SUBS --suite quick --json "$W/one_gpu.json"
timed two_gpus kbench eval $SUBS --suite quick --gpus all --json "$W/two_gpus.json"
if [ "$SECONDS" -gt 280 ]; then echo "no time left for the fault run"; else
# Fault: the child on GPU 1 killed once its first case is back; its unit's rest goes to GPU 0.
( kbench eval submissions/qknorm tests/fixtures/qknorm/good_torch --suite quick --gpus all \
    --json "$W/fault.json" > "$W/fault.log" 2>&1; echo "exit $?" >> "$W/fault.log" ) &
runner=$!
for _ in $(seq 600); do
  kpid=$(pgrep -P "$runner" -f "kbench eval" | head -1)
  child=$( [ -n "$kpid" ] && pgrep -P "$kpid" -f "kbench.gpu_child cuda" | sed -n 2p )
  [ -n "$child" ] && sleep 12 && kill -9 "$child" && echo "killed child $child (GPU 1) 12 s after it started" && break
  sleep 0.2
done
wait "$runner"; echo "fault: $(tail -1 "$W/fault.log")"
fi
python3 bench/scale_out_compare.py "$W" "$git_commit" | tee "$W/scale_out.txt"
cp "$W/scale_out.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/scale_out.tgz" -C "$W" .
