#!/usr/bin/env bash
# Probe call: the originals' own harnesses on the bundled kernels (bench/originals.py).
set -o pipefail
source bench/gpu_env.sh || exit 1
timeout $(( ${LIMIT_S:-580} - 5 )) python3 bench/originals.py probe/orig --out $OUT/orig 2>&1 | tail -60
