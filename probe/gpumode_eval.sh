#!/usr/bin/env bash
# GPU MODE's own eval.py (problems/amd/mla-decode, carried in probe/orig/gpumode) on the bundled
# mla_decode submission: test mode on task.yml's four tests, benchmark mode on them and prefill 4096
# (its 6144 benchmark dies in the original's own unchunked reference on an 80 GB card).
D=/tmp/gm; rm -rf $D; mkdir -p $D
cp probe/orig/gpumode/*.py $D/; cp submissions/mla_decode/{submission,mla_decode_gluon,mla_launch}.py $D/
cat > $D/tests.txt <<'T'
batchsize: 128; dim: 7168; dq: 1536; prefill: 128; seed: 9247
batchsize: 128; dim: 7168; dq: 1536; prefill: 512; seed: 2197
batchsize: 128; dim: 7168; dq: 1536; prefill: 1024; seed: 9107
batchsize: 128; dim: 7168; dq: 1536; prefill: 2048; seed: 5291
T
cp $D/tests.txt $D/bench.txt; echo "batchsize: 128; dim: 7168; dq: 1536; prefill: 4096; seed: 9817" >> $D/bench.txt
cd $D
for mode in test benchmark; do
  f=tests.txt; [ $mode = benchmark ] && f=bench.txt
  t0=$(date +%s)
  POPCORN_FD=3 timeout ${GM_LIMIT:-200} python3 eval.py $mode $f 3>$OUT/gpumode-$mode.txt > $OUT/gpumode-$mode.log 2>&1
  echo "gpumode $mode: rc $? in $(( $(date +%s) - t0 )) s"; grep -v "spec" $OUT/gpumode-$mode.txt | tr '\n' ' ' | head -c 3000; echo
done
