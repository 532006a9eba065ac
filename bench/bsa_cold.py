"""block_sparse_attn's call in the native loop (fresh inputs, sync, call): where its host time goes (a probe)."""
import gc, statistics, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import torch
from kbench.tasks.task import get_task, submission_file
task = get_task("block_sparse_attn")
contract, module = task.contract, task.module
cases = [c for c in task.suite("full").cases if c.name in ("full-window-1", "full-global-3")]
entry = contract.load(submission_file(task, ROOT / "submissions" / "block_sparse_attn"))
contract.setup(entry, [dict(c.params) for c in cases], "cuda")
sub = sys.modules[entry.fn.__module__]
clock = time.perf_counter
gcs = []
gc.callbacks.append(lambda phase, info: gcs.append((phase, info["generation"], clock())))
for case in cases:
    for mode in ("native", "native+gc.collect", "native+warm-tensor-op", "warm"):
        ret, tot, ev, ngc = [], [], [], 0
        inputs = module.generate(dict(case.params, seed=1), "cuda")
        for i in range(12):
            if mode != "warm":
                inputs = module.generate(dict(case.params, seed=i), "cuda")
            torch.cuda.synchronize()
            if mode == "native+gc.collect":
                gc.collect()
            if mode == "native+warm-tensor-op":
                inputs["q"].data_ptr(); torch.empty(1, device="cuda")
                torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            n0 = len(gcs)
            t0 = clock()
            out = contract.call(entry, inputs)
            t1 = clock()
            e1.record()
            torch.cuda.synchronize()
            t2 = clock()
            ngc += len(gcs) - n0
            ret.append((t1 - t0) * 1e6); tot.append((t2 - t0) * 1e6); ev.append(e0.elapsed_time(e1) * 1e3)
            del out
        m = statistics.median
        print(f"{case.name} {mode:24s} return {m(ret):7.1f}  total {m(tot):7.1f}  events {m(ev):7.1f} us  gc runs {ngc}",
              flush=True)
# step timing of the lean launch, native loop
import bsa_gluon as G
steps = {}
orig_lp = G.DirectLauncher.launch_pointers
def lp(self, *a, **k):
    t = clock(); r = orig_lp(self, *a, **k); steps.setdefault("launch_pointers", []).append((clock() - t) * 1e6); return r
G.DirectLauncher.launch_pointers = lp
orig_out = sub._outputs
def outs(q):
    t = clock(); r = orig_out(q); steps.setdefault("_outputs", []).append((clock() - t) * 1e6); return r
sub._outputs = outs
orig_raw = None
for i in range(12):
    inputs = module.generate(dict(cases[0].params, seed=i), "cuda")
    torch.cuda.synchronize()
    t0 = clock(); out = contract.call(entry, inputs); steps.setdefault("call", []).append((clock() - t0) * 1e6)
    torch.cuda.synchronize(); del out
for k, v in steps.items():
    print(f"step {k:18s} {statistics.median(v):7.1f} us  (min {min(v):.1f})")
