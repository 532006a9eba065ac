# The lean call's host steps under kbench's timer (decode and two full cases), then the GPU tests.
source bench/gpu_env.sh
mkdir -p $OUT/steps
export PROBE_OUT=$OUT/steps
timeout 170 kbench eval probe/mla_host --task mla_decode --suite decode --baseline reference --json $OUT/steps/dec.json > $OUT/steps/dec.log 2>&1; echo dec rc $?
timeout 150 kbench eval probe/mla_host --task mla_decode --suite full --case prefill128 --case prefill1024 --baseline reference --json $OUT/steps/full.json > $OUT/steps/full.log 2>&1; echo full rc $?
mkdir -p $OUT/native; PROBE_OUT=$OUT/native timeout 120 python3 bench/mla_decode_native.py --suite decode --submission probe/mla_host --baseline none > $OUT/native/dec.log 2>&1; echo native rc $?
PROBE_OUT=$OUT/native timeout 90 python3 bench/mla_decode_native.py --suite full --cases prefill128,prefill1024 --submission probe/mla_host --baseline none > $OUT/native/full.log 2>&1; echo native rc $?
tail -4 $OUT/native/*.log; python3 probe/summ.py $OUT/native
tail -6 $OUT/steps/dec.log $OUT/steps/full.log
python3 probe/summ.py $OUT/steps
TESTS_LIMIT_S=320 bash bench/gpu_tests.sh
