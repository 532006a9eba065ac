"""Why the original's protocol sees block_sparse_attn's device span at ~2x kbench's: per full case,
fresh inputs as the native protocol makes them, the call's CUDA-event span on the first call, on a
second call of the same inputs, and on a first call after an L2-sized flush and a 2 ms busy spin."""
import statistics, sys, torch
sys.path.insert(0, ".")
from pathlib import Path
from kbench.tasks.task import get_task, submission_file
task = get_task("block_sparse_attn")
contract, module = task.contract, task.module
entry = contract.load(submission_file(task, Path("submissions/block_sparse_attn")))
cases = task.suite("full").cases
contract.setup(entry, [dict(c.params) for c in cases], "cuda")
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def span(inputs, pre=None):
    torch.cuda.synchronize()
    if pre: pre()
    e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    e[0].record(); contract.call(entry, inputs); e[1].record(); torch.cuda.synchronize()
    return e[0].elapsed_time(e[1])
def busy():
    flush.zero_(); torch.cuda._sleep(4_000_000)
for case in cases:
    r = {"first": [], "second": [], "busy_first": []}
    for i in range(3):
        inp = module.generate(dict(case.params, seed=module.spec_mod.derived_seed(case.seed, f"measure:{i}")), "cuda")
        r["first"].append(span(inp)); r["second"].append(span(inp))
        inp = module.generate(dict(case.params, seed=module.spec_mod.derived_seed(case.seed, f"m2:{i}")), "cuda")
        r["busy_first"].append(span(inp, busy))
    print(f"{case.name:<18}", "  ".join(f"{k} {statistics.median(v):.3f}" for k, v in r.items()), flush=True)
