#!/usr/bin/env bash
# Call 1: the qknorm crosscheck's bias by process layout, then the originals' harnesses.
source bench/gpu_env.sh || exit 1
cd "$PWD"; T0=$SECONDS
python3 -m kbench eval submissions/qknorm --suite quick --json $OUT/q1.json > $OUT/q1.log 2>&1; echo "eval rc $? $((SECONDS-T0)) s"; tail -3 $OUT/q1.log
for mode in "--only submission" "--only baseline" ""; do
  timeout 100 python3 bench/crosscheck.py qknorm --suite quick $mode --against $OUT/q1.json > "$OUT/cc${mode// /_}.log" 2>&1
  echo "crosscheck [$mode] rc $? $((SECONDS-T0)) s"; grep -E "kbench .* plain" "$OUT/cc${mode// /_}.log"
done
timeout 400 python3 bench/originals.py orig --out $OUT/orig 2>&1 | tail -40
echo "total $((SECONDS-T0)) s"
