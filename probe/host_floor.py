"""The host floor of a call in the originals' states: what the cheapest possible call costs the host
(one torch.empty_like, one raw launch of a trivial compiled Triton kernel fed 8 integers, both)
right after the native protocol's own steps (fresh block_sparse_attn inputs generated, a synchronize),
against the same steps back to back (warm). Medians over 15 rounds, us."""
import statistics as st, sys, time, torch, triton, triton.language as tl
sys.path.insert(0, ".")
from kbench.tasks.task import get_task

@triton.jit
def _noop(a, b, c, d, e, f, g, h, n):
    if tl.program_id(0) == n:
        tl.store(a, 0)

task = get_task("block_sparse_attn")
case = task.suite("full").cases[0]
x = torch.zeros(16, device="cuda")
k = _noop[(1,)](x, x, x, x, x, x, x, x, 99999)
raw = k.run.launch
base = (k.function, k.run.launch_cooperative_grid, k.run.launch_pdl, None, None, k.packed_metadata, None, None, None)
ptr = x.data_ptr()
stream = torch.cuda.current_stream().cuda_stream
def launch():
    raw(1, 1, 1, stream, *base, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, 99999)
launch(); torch.cuda.synchronize()
q = torch.empty((2, 16, 8192, 128), dtype=torch.bfloat16, device="cuda")
steps = {"empty_like": lambda: torch.empty_like(q), "raw launch": launch,
         "empty_like x2 + launch": lambda: (torch.empty_like(q), torch.empty_like(q), launch())}
res = {k: {"cold": [], "warm": []} for k in steps}
for i in range(15):
    for name, fn in steps.items():
        inp = task.module.generate(dict(case.params, seed=1000 + i), "cuda")
        torch.cuda.synchronize()
        t = time.perf_counter(); fn(); res[name]["cold"].append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
        for _ in range(5):
            fn()
        t = time.perf_counter(); fn(); res[name]["warm"].append((time.perf_counter() - t) * 1e6)
        del inp
for name, r in res.items():
    print(f"{name:<24} after the protocol's steps {st.median(r['cold']):6.1f} us   back to back {st.median(r['warm']):6.1f} us", flush=True)
