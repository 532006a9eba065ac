#!/usr/bin/env bash
# Probe call: projection launch shapes at prefill128 (bs 128), ncu of the down and Q-up kernels there;
# the GPU tests and the decode precision check at HEAD.
source bench/gpu_env.sh || exit 1
timeout 200 python3 probe/mla_sweep.py prefill128 > $OUT/sweep128.log 2>&1
cat $OUT/sweep128.log
timeout 60 bash bench/ncu_profile.sh down _down_kernel python3 probe/mla_sweep.py prefill128 --what down --default-only | head -30
timeout 60 bash bench/ncu_profile.sh qup _q_up_absorb python3 probe/mla_sweep.py prefill128 --what qup --default-only | head -30
grep -hE "\"(Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread)\"" $OUT/down.details.csv $OUT/qup.details.csv | cut -c1-300
TESTS_LIMIT_S=180 bash bench/gpu_tests.sh | tail -5
timeout 90 python3 submissions/mla_decode/dev/mla_decode_precision.py --suite decode --device cuda --seeds 200 > $OUT/prec.log 2>&1
tail -20 $OUT/prec.log
