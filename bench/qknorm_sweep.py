"""Rows per program x warps for the bundled qknorm kernel (do_bench and CUDA-graph medians, us).

Run on the GPU machine: python3 bench/qknorm_sweep.py
"""
import itertools

import torch
import triton.testing

from kbench.loader import load_module

sub = load_module("submissions/qknorm/submission.py", "qk_sub")
CASES = [(1, 32, 8, 128, torch.float16), (64, 32, 8, 128, torch.float16), (256, 32, 32, 128, torch.float16),
         (256, 32, 8, 64, torch.float16), (16384, 32, 8, 128, torch.bfloat16), (8192, 16, 8, 256, torch.bfloat16)]


def graph_us(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return triton.testing.do_bench(lambda: g.replay(), warmup=10, rep=50) * 1e3


print("elems warps " + " ".join(f"b{b}kv{kv}d{d}" for b, _, kv, d, _ in CASES))
for elems, warps in itertools.product((512, 1024, 2048, 4096, 8192), (1, 2, 4, 8)):
    sub.ROW_ELEMS, sub.NUM_WARPS = elems, warps
    sub._LAUNCHERS.clear()
    row = []
    for b, hq, hkv, d, dt in CASES:
        qkv = torch.randn(b, hq + 2 * hkv, d, device="cuda", dtype=dt)
        q, k, w = qkv[:, :hq], qkv[:, hq:hq + hkv], torch.randn(d, device="cuda", dtype=dt)
        fn = lambda: sub.qknorm(q, k, w)
        fn()
        row.append(f"{triton.testing.do_bench(fn, warmup=10, rep=50) * 1e3:.1f}/{graph_us(fn):.1f}")
    print(f"{elems:5d} {warps:5d} " + " ".join(row), flush=True)
