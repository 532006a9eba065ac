"""block_sparse_attn under the original's native protocol: where the host-clock time goes.

    python3 bench/bsa_native_host.py   (after `source bench/gpu_env.sh`; a GPU is needed)

Inputs generated on the host as the original makes them (seconds of CPU work per full-size
set), then per fresh input set one mode, rotating, timed with the host clock around the call
and a synchronize (plus CUDA events): "floor" = a 1-element add_ + synchronize (what any
launch pays in that state: the host's part), "alloc" = the submission's two torch.empty only,
"fast" = the submission (direct launch of the compiled kernel), "jit" = the submission with
FAST_LAUNCH off (Triton's JIT dispatch). Prints per case and mode the median return time (the
submission's host path), total and event span over 4 sets. Figures:
docs/benchmarks-block_sparse_attn.md, "The native protocol's host part".
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.tasks import get_task  # noqa: E402

MODES = ("floor", "alloc", "fast", "jit")
CASES = ("quick-window-1", "full-window-1", "full-retrieval-3")
ARGS = ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")


def main() -> int:
    task = get_task("block_sparse_attn")
    m, c = task.module, task.contract
    entry = c.load(ROOT / "submissions" / "block_sparse_attn")
    sub = sys.modules[entry.fn.__module__]
    allcases = {x.name: x for s in ("quick", "full") for x in task.suite(s).cases}
    c.setup(entry, [dict(allcases[n].params) for n in CASES], "cuda")
    tiny = torch.zeros(1, device="cuda")
    for name in CASES:
        case = allcases[name]
        res = {k: [] for k in MODES}
        for i in range(4 * len(MODES)):
            mode = MODES[i % len(MODES)]
            inputs = m.generate(dict(case.params, seed=case.seed + i), "cuda")
            a = [inputs[k] for k in ARGS]
            sub.FAST_LAUNCH = mode != "jit"
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            t0 = time.perf_counter()
            if mode == "floor":
                tiny.add_(1)
            elif mode == "alloc":
                o = torch.empty_like(a[0])
                lse = torch.empty(a[0].shape[:3], device="cuda", dtype=torch.float32)
            else:
                o, lse = sub.block_sparse_attn_fwd(*a)
            t1 = time.perf_counter()
            e1.record()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            res[mode].append(((t1 - t0) * 1e3, (t2 - t0) * 1e3, e0.elapsed_time(e1)))
            del inputs, a
        for mode in MODES:
            r = res[mode]
            print(f"{name:18s} {mode:5s} return {statistics.median(x[0] for x in r):.3f} ms  "
                  f"total {statistics.median(x[1] for x in r):.3f} ms  "
                  f"events {statistics.median(x[2] for x in r):.3f} ms  (n={len(r)})", flush=True)
    sub.FAST_LAUNCH = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
