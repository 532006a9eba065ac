"""Where a qknorm call's time goes on the GPU host: allocation, launch path, kernel.

Run on the GPU machine: python3 bench/qknorm_host.py
"""
import importlib.util
import time

import torch
import triton.testing

from kbench.loader import load_module

sub = load_module("submissions/qknorm/submission.py", "qk_sub")
base = load_module("reference/qknorm/baseline_flashinfer.py", "qk_base")


def host_us(fn, n=2000):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def synced_event_us(fn, n=500):
    xs = []
    for _ in range(n):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        xs.append(s.elapsed_time(e) * 1e3)
    xs.sort()
    return xs[len(xs) // 2], xs[len(xs) // 4], xs[3 * len(xs) // 4]


def graph_us(fn, n=200):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return triton.testing.do_bench(lambda: g.replay(), warmup=25, rep=100) * 1e3


for b, hkv, d in [(1, 8, 128), (64, 8, 128), (256, 32, 128), (256, 8, 64)]:
    hq = 32
    qkv = torch.randn(b, hq + 2 * hkv, d, device="cuda", dtype=torch.float16)
    q, k = qkv[:, :hq], qkv[:, hq:hq + hkv]
    w = torch.randn(d, device="cuda", dtype=torch.float16)
    f_sub = lambda: sub.qknorm(q, k, w)
    f_base = lambda: base.qknorm(q, k, w)
    f_sub(); f_sub()
    launcher = next(iter(sub._LAUNCHERS.values()))
    print(f"case b{b} kv{hkv} d{d}: launcher closure state: "
          f"{[c.cell_contents for c in launcher.__closure__ if isinstance(c.cell_contents, dict)]}")
    row = {
        "empty_us": host_us(lambda: torch.empty((b, hq, d), dtype=torch.float16, device="cuda")),
        "sub_host_us": host_us(f_sub), "base_host_us": host_us(f_base),
        "sub_synced_ev": synced_event_us(f_sub), "base_synced_ev": synced_event_us(f_base),
        "sub_dobench_us": triton.testing.do_bench(f_sub, warmup=25, rep=100) * 1e3,
        "base_dobench_us": triton.testing.do_bench(f_base, warmup=25, rep=100) * 1e3,
        "sub_graph_us": graph_us(f_sub), "base_graph_us": graph_us(f_base),
    }
    print({k: (tuple(round(x, 1) for x in v) if isinstance(v, tuple) else round(v, 2)) for k, v in row.items()})
