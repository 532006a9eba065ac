#!/usr/bin/env bash
# One device call: the originals' harnesses, the bsa call's host steps and the host floor, then the mla margin check with what is left.
END=$(( $(date +%s) + ${CALL_S:-580} )); left() { echo $(( END - $(date +%s) )); }
source bench/gpu_env.sh || exit 1
echo "== frontier ($(left) s left)"; FCS_LIMIT=120 bash probe/frontier_eval.sh 2>&1 | tail -12
echo "== gpumode ($(left) s left)"; GM_LIMIT=130 bash probe/gpumode_eval.sh 2>&1 | tail -12
echo "== bsa original ($(left) s left)"; timeout 160 python3 probe/bsa_original.py > $OUT/bsa_original.txt 2>&1; echo "rc $?"; cut -c1-400 $OUT/bsa_original.txt | tail -40
echo "== bsa steps ($(left) s left)"; timeout 70 python3 probe/bsa_steps.py 2>&1 | tee $OUT/bsa_steps.txt | tail -40
echo "== host floor ($(left) s left)"; timeout 45 python3 probe/host_floor.py 2>&1 | tail -5
L=$(( $(left) - 10 )); echo "== mla margin ($L s)"
[ $L -gt 40 ] && timeout $L python3 submissions/mla_decode/dev/mla_decode_precision.py --suite full --device cuda --seeds ${SEEDS:-200} 2>&1 | tee $OUT/mla_margin.txt | tail -20
echo "== done ($(left) s left)"
