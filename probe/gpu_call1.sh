#!/usr/bin/env bash
# One device call: the bsa call's host steps, the originals' harnesses, then the mla margin check with what is left.
END=$(( $(date +%s) + ${CALL_S:-580} )); left() { echo $(( END - $(date +%s) )); }
source bench/gpu_env.sh || exit 1
git log -1 --format="commit %h" 2>/dev/null || true
echo "== bsa steps ($(left) s left)"; timeout 90 python3 probe/bsa_steps.py 2>&1 | tee $OUT/bsa_steps.txt | tail -40
echo "== host floor ($(left) s left)"; timeout 60 python3 probe/host_floor.py 2>&1 | tail -5
echo "== frontier ($(left) s left)"; FCS_LIMIT=150 bash probe/frontier_eval.sh 2>&1 | tail -12
echo "== bsa original ($(left) s left)"; timeout 200 python3 probe/bsa_original.py > $OUT/bsa_original.txt 2>&1; echo "rc $?"; cut -c1-400 $OUT/bsa_original.txt | tail -40
echo "== gpumode ($(left) s left)"; GM_LIMIT=150 bash probe/gpumode_eval.sh 2>&1 | tail -12
L=$(( $(left) - 15 )); echo "== mla margin ($L s)"
[ $L -gt 40 ] && timeout $L python3 submissions/mla_decode/dev/mla_decode_precision.py --suite full --device cuda --seeds ${SEEDS:-200} 2>&1 | tee $OUT/mla_margin.txt | tail -20
echo "== done ($(left) s left)"
