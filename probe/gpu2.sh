#!/usr/bin/env bash
# Call A: mla_decode's host path (down kernel first, plain-Python host arithmetic) against d5795c1's; the three originals' harnesses (bench/originals.py).
source bench/gpu_env.sh || exit 1
T0=$SECONDS; KB="python3 -m kbench"
python3 - <<'PY'
import timeit, triton
n = 20000
for name, f in (("triton.cdiv", lambda: triton.cdiv(1000, 64)), ("triton.next_power_of_2", lambda: triton.next_power_of_2(100)),
                ("-(-a // b)", lambda: -(-1000 // 64))):
    print(f"{name}: {timeit.timeit(f, number=n) / n * 1e6:.2f} us (triton {triton.__version__})")
PY
for s in decode quick; do
  timeout 150 $KB compare probe/mla_old submissions/mla_decode --task mla_decode --suite $s --json $OUT/cmp_$s.json > $OUT/cmp_$s.log 2>&1
  echo "compare $s rc $? $((SECONDS-T0)) s"; cat $OUT/cmp_$s.log | tail -14
done
timeout 150 $KB eval probe/mla_old submissions/mla_decode --task mla_decode --suite decode --json $OUT/eval_decode.json > $OUT/eval_decode.log 2>&1
echo "eval decode rc $? $((SECONDS-T0)) s"; grep -E "^\||==|b1_|b4_|b16_" $OUT/eval_decode.log | head -20
for s in full decode; do
  timeout 120 python3 bench/mla_decode_native.py --suite $s --baseline none --out $OUT/native_$s > $OUT/native_$s.log 2>&1
  echo "native $s rc $? $((SECONDS-T0)) s"; tail -12 $OUT/native_$s.log
done
timeout $((590 - SECONDS)) python3 bench/originals.py orig --out $OUT/orig 2>&1 | tail -40
echo "total $((SECONDS-T0)) s"
