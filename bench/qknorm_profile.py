"""Profile the host side of one qknorm call on the GPU host (where does the time go?)."""
import cProfile
import inspect
import pstats
import time

import torch
import triton

from kbench.loader import load_module

sub = load_module("submissions/qknorm/submission.py", "qk_sub")
from triton.compiler.compiler import CompiledKernel  # noqa: E402

print("triton", triton.__version__)
print(inspect.getsource(CompiledKernel.__getitem__))
print(inspect.getsource(CompiledKernel.launch_metadata))

b, hq, hkv, d = 64, 32, 8, 128
qkv = torch.randn(b, hq + 2 * hkv, d, device="cuda", dtype=torch.float16)
q, k, w = qkv[:, :hq], qkv[:, hq:hq + hkv], torch.randn(d, device="cuda", dtype=torch.float16)
sub.qknorm(q, k, w); sub.qknorm(q, k, w)
launch = next(iter(sub._LAUNCHERS.values()))
state = [c.cell_contents for c in launch.__closure__ if isinstance(c.cell_contents, dict) and "run" in c.cell_contents][0]
run = state["run"]
qo, ko = torch.empty(q.shape, dtype=q.dtype, device="cuda"), torch.empty(k.shape, dtype=q.dtype, device="cuda")


def per_call(fn, n=3000):
    torch.cuda.synchronize()
    xs = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); xs.append(time.perf_counter() - t0)
        if len(xs) % 200 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    xs.sort()
    return f"median {xs[len(xs)//2]*1e6:.1f} us  p90 {xs[9*len(xs)//10]*1e6:.1f}  p99 {xs[99*len(xs)//100]*1e6:.1f}"


print("full call     ", per_call(lambda: sub.qknorm(q, k, w)))
print("torch.empty x2", per_call(lambda: (torch.empty(q.shape, dtype=q.dtype, device=q.device), torch.empty(k.shape, dtype=q.dtype, device=q.device))))
print("key           ", per_call(lambda: (q.shape, q.stride(), k.shape, k.stride(), q.dtype, q.device, q.data_ptr() & 15, k.data_ptr() & 15, w.data_ptr() & 15)))
print("runner        ", per_call(lambda: run(q, k, w, qo, ko)))
print("get stream    ", per_call(lambda: torch.cuda.current_stream().cuda_stream))
pr = cProfile.Profile()
pr.enable()
for _ in range(2000):
    sub.qknorm(q, k, w)
pr.disable()
torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(14)
