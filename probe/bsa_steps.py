"""Where block_sparse_attn's call spends its time in the original's protocol (fresh inputs, synchronize,
host clock around the call): per full case and 5 measure sets, host stamps at the call's start, the
launcher's entry and exit, the return, and CUDA events before the call, just before the raw launch,
and after the call. Then the same inputs called again (second), and 20 back-to-back calls (warm)."""
import statistics as st, sys, time, torch
sys.path.insert(0, ".")
from pathlib import Path
from kbench.tasks.task import get_task, submission_file
task = get_task("block_sparse_attn")
contract, module = task.contract, task.module
entry = contract.load(submission_file(task, Path("submissions/block_sparse_attn")))
cases = task.suite("full").cases
contract.setup(entry, [dict(c.params) for c in cases], "cuda")
g = entry.fn.__globals__
DL = g["_gluon"].DirectLauncher
orig_lp, orig_out = DL.launch_pointers, g["_outputs"]
S = {}
def lp(self, *a, **k):
    S["lp0"] = time.perf_counter(); S["ev_pre"].record()
    fills = [0]
    f = self.fill
    def counting(*x):
        fills[0] += 1; return f(*x)
    self.fill = counting
    try:
        orig_lp(self, *a, **k)
    finally:
        self.fill = f
    S["lp1"] = time.perf_counter(); S["fills"] = fills[0]
def outs(q):
    t = time.perf_counter(); r = orig_out(q); S.setdefault("alloc_us", []).append((time.perf_counter() - t) * 1e6); return r
DL.launch_pointers = lp; g["_outputs"] = outs
def one(inputs):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    S.clear(); S["ev_pre"] = ev[1]
    torch.cuda.synchronize()
    ev[0].record(); t0 = time.perf_counter()
    contract.call(entry, inputs)
    t1 = time.perf_counter(); ev[2].record(); torch.cuda.synchronize(); t2 = time.perf_counter()
    if "lp0" not in S:
        return None
    return dict(pre=(S["lp0"] - t0) * 1e6, launch=(S["lp1"] - S["lp0"]) * 1e6, post=(t1 - S["lp1"]) * 1e6,
                ret=(t1 - t0) * 1e6, wall=(t2 - t0) * 1e6, dev_wait=ev[0].elapsed_time(ev[1]) * 1e3,
                dev_run=ev[1].elapsed_time(ev[2]) * 1e3, fills=S["fills"], alloc=sum(S.get("alloc_us", [])))
print("per case, medians over 5 sets (us): pre = call start to launcher, launch = launcher (descriptors + raw launch), "
      "post = launcher to return (spare outputs), dev_wait = event before the call to event before the launch, "
      "dev_run = that to the event after the call", flush=True)
for case in cases:
    rows = {"first": [], "second": []}
    for i in range(5):
        inp = module.generate(dict(case.params, seed=module.spec_mod.derived_seed(case.seed, f"measure:{i}")), "cuda")
        rows["first"].append(one(inp)); rows["second"].append(one(inp))
        if i == 4:
            torch.cuda.synchronize(); t = time.perf_counter()
            for _ in range(20):
                contract.call(entry, inp)
            warm = (time.perf_counter() - t) / 20 * 1e6; torch.cuda.synchronize()
        del inp
    for k, rs in rows.items():
        rs = [r for r in rs if r]
        if not rs:
            print(f"{case.name:<18} {k}: the lean path did not run"); continue
        print(f"{case.name:<18} {k:<6} " + " ".join(f"{f} {st.median(r[f] for r in rs):7.1f}" for f in rs[0]), flush=True)
    print(f"{case.name:<18} warm back-to-back call {warm:.1f} us", flush=True)
