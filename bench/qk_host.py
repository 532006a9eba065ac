"""qknorm's host path piece by piece with the device busy (a probe)."""
import statistics, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "submissions" / "qknorm"))
import torch
import submission as S
from kbench.tasks.task import get_task
task = get_task("qknorm")
case = [c for c in task.suite("quick").cases if c.name == "kv8_q32_d128_b1"][0]
inp = task.module.generate(dict(case.params), "cuda")
q, k, w = inp["q"], inp["k"], inp["norm_weight"]
clock = time.perf_counter
def t(label, fn, n=30):
    fn(); torch.cuda.synchronize(); ts = []
    for _ in range(n):
        torch.cuda._sleep(2_000_000)
        t0 = clock()
        for _ in range(20): fn()
        ts.append((clock() - t0) * 1e6 / 20)
        torch.cuda.synchronize()
    print(f"{label:44s} {statistics.median(ts):7.2f} us", flush=True)
t("submission qknorm()", lambda: S.qknorm(q, k, w))
t("contract.call", lambda: task.contract.call(S.qknorm, inp))
shape_q, shape_k = q.shape, k.shape
t("2x torch.empty", lambda: (torch.empty(shape_q, dtype=q.dtype, device=q.device), torch.empty(shape_k, dtype=q.dtype, device=q.device)))
n_q, n_k = q.numel(), k.numel()
t("1x torch.empty + split + 2 views", lambda: [p.view(s) for p, s in zip(torch.empty(n_q + n_k, dtype=q.dtype, device=q.device).split([n_q, n_k]), (shape_q, shape_k))])
t("key tuple", lambda: (q.shape, q.stride(), k.shape, k.stride(), q.dtype, q.device, q.data_ptr() & 15, k.data_ptr() & 15, w.data_ptr() & 15))
key = (q.shape, q.stride(), k.shape, k.stride(), q.dtype, q.device, q.data_ptr() & 15, k.data_ptr() & 15, w.data_ptr() & 15)
launch = S._LAUNCHERS[key]
qo, ko = launch(q, k, w)
run = None
for cell in launch.__closure__:
    c = cell.cell_contents
    if isinstance(c, dict) and "run" in c:
        run = c["run"]
t("direct run (tensors)", lambda: run(q, k, w, qo, ko))
t("raw stream", lambda: torch._C._cuda_getCurrentRawStream(0))
t("5x data_ptr", lambda: (q.data_ptr(), k.data_ptr(), w.data_ptr(), qo.data_ptr(), ko.data_ptr()))
# the C launcher itself, with ints
cells = {n: c.cell_contents for n, c in zip(run.__code__.co_freevars, run.__closure__)}
print("cells", {k: type(v).__name__ for k, v in cells.items()})
L = cells["run"]
raw, fn, meta, extra = L.launch, cells["function"], cells["metadata"], cells["extra"]
print("scratch", L.global_scratch_size, L.profile_scratch_size, type(raw))
g = (cells["g0"], cells["g1"], cells["g2"])
ptrs = (q.data_ptr(), k.data_ptr(), w.data_ptr(), qo.data_ptr(), ko.data_ptr())
base = (fn, L.launch_cooperative_grid, L.launch_pdl, None, None, meta, None, None, None)
for n in (len(extra), 0):
    try:
        raw(*g, torch._C._cuda_getCurrentRawStream(0), *base, *ptrs, *extra[:n]); print("raw ok with", n); break
    except TypeError as e:
        print("raw TypeError", e)
t("raw C launch, ints", lambda: raw(*g, torch._C._cuda_getCurrentRawStream(0), *base, *ptrs, *extra[:n]))
t("raw C launch, ints, stream cached", lambda s=torch._C._cuda_getCurrentRawStream(0): raw(*g, s, *base, *ptrs, *extra[:n]))
t("torch.empty_like(q-shaped out)", lambda: torch.empty_like(qo))
t("qo.new_empty(shape)", lambda: qo.new_empty(shape_q))
