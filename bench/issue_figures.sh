#!/usr/bin/env bash
# The per-case figures issues 10 (mla_decode) and 11 (block_sparse_attn) ask for, each task in one
# device call: every command's whole log and JSON under $OUT/figures/, the tail of each here.
#
#   bash bench/issue_figures.sh mla     # ~80 s on an H200: kbench full (FlashInfer baseline) and
#                                       # decode, the native GPU MODE figure, the parts at 128 / 6144
#   bash bench/issue_figures.sh bsa     # ~140 s: kbench full, the native figure, 207 fresh seeds
#
# Run on the device host with the flashinfer wheels carried (.whl). Record the figures in
# docs/benchmarks-mla_decode.md / docs/benchmarks-block_sparse_attn.md with date, card and commit.
set -o pipefail
source bench/gpu_env.sh || exit 1
dir="$OUT/figures"
mkdir -p "$dir"

step() {   # step NAME LIMIT_S COMMAND...: the command's log in $dir/NAME.log, its tail and exit here
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" > "$dir/$name.log" 2>&1
  echo "   exit $? after $SECONDS s of the script"
  tail -n 14 "$dir/$name.log"
}

case "${1:-}" in
  mla)
    step mla-full-flashinfer 150 python3 -m kbench eval submissions/mla_decode --suite full \
      --baseline flashinfer --json "$dir/mla-full-flashinfer.json"
    step mla-decode 100 python3 -m kbench eval submissions/mla_decode --suite decode --json "$dir/mla-decode.json"
    step mla-native 200 python3 bench/mla_decode_native.py --out "$dir/mla-native"
    step mla-parts-prefill128 60 python3 bench/mla_decode_parts.py --case prefill128 --calls 10
    step mla-parts-prefill6144 60 python3 bench/mla_decode_parts.py --case prefill6144 --calls 10
    ;;
  bsa)
    step bsa-full 120 python3 -m kbench eval submissions/block_sparse_attn --suite full --json "$dir/bsa-full.json"
    step bsa-native 150 python3 bench/block_sparse_attn_native.py --suites quick,full --out "$dir/bsa-native"
    step bsa-precision-full 90 python3 bench/bsa_precision_sweep.py --suite full --seeds 23 --no-timing \
      --seed-base 35035
    step bsa-precision-broad 90 python3 bench/bsa_precision_sweep.py --suite broad --seeds 23 --no-timing \
      --seed-base 35035
    ;;
  *)
    echo "usage: bash bench/issue_figures.sh mla|bsa" >&2
    exit 2
    ;;
esac
