# The lean call's host steps under kbench's timer and under the native protocol, then the GPU tests
# in what is left of LIMIT_S.
start=$SECONDS
source bench/gpu_env.sh
mkdir -p $OUT/steps $OUT/native
export PROBE_OUT=$OUT/steps
timeout 120 kbench eval probe/mla_host --task mla_decode --suite decode --baseline none --json $OUT/steps/dec.json > $OUT/steps/dec.log 2>&1; echo dec rc $?
timeout 100 kbench eval probe/mla_host --task mla_decode --suite full --case prefill128 --case prefill1024 --baseline none --json $OUT/steps/full.json > $OUT/steps/full.log 2>&1; echo full rc $?
PROBE_OUT=$OUT/native timeout 80 python3 bench/mla_decode_native.py --suite decode --submission probe/mla_host --baseline none > $OUT/native/dec.log 2>&1; echo native rc $?
PROBE_OUT=$OUT/native timeout 60 python3 bench/mla_decode_native.py --suite full --cases prefill128,prefill1024 --submission probe/mla_host --baseline none > $OUT/native/full.log 2>&1; echo native rc $?
tail -5 $OUT/native/*.log; python3 probe/summ.py $OUT/native
tail -6 $OUT/steps/dec.log $OUT/steps/full.log
python3 probe/summ.py $OUT/steps
echo "elapsed $((SECONDS - start)) s"
TESTS_LIMIT_S=$(( ${LIMIT_S:-540} - (SECONDS - start) - 15 )) bash bench/gpu_tests.sh
