"""block_sparse_attn: the bundled call's host path step by step, warm (a GPU is needed).

    python3 bench/bsa_host_steps.py [--submission DIR]   (after `source bench/gpu_env.sh`)

On full-window-1's inputs, each step of the direct launcher's host path as _launch_gluon takes it
(the allocations, the checks, the stream read, the tile counter's arguments, the direct launch)
and the whole call (since ff28a0e the lean path, `submission._launch_lean`), 2000 times each,
median return in us (the launches synchronized every 50 calls). The host's own speed moves
between runs: compare two submissions in one call, in turn. Figures:
docs/benchmarks-block_sparse_attn.md, "The call's host path trimmed" and "The call's host path, cold".
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.tasks import get_task  # noqa: E402

CALLS = 2000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--submission", type=Path, default=ROOT / "submissions" / "block_sparse_attn")
    args = ap.parse_args()
    task = get_task("block_sparse_attn")
    m, c = task.module, task.contract
    entry = c.load(args.submission)
    sub = sys.modules[entry.fn.__module__]
    case = next(x for x in task.suite("full").cases if x.name == "full-window-1")
    c.setup(entry, [dict(case.params)], "cuda")
    inp = m.generate_timed(dict(case.params), "cuda", 5)
    q, k, v, rp, ci, sl = (inp[n] for n in ("q", "k", "v", "row_ptr", "col_idx", "seq_lens"))
    o, lse = sub.block_sparse_attn_fwd(q, k, v, rp, ci, sl)   # compiles nothing (setup did); caches the launcher
    torch.cuda.synchronize()
    g = sub._gluon
    key = ("gluon", sub.GLUON_STAGES, q.device, rp.dtype, ci.dtype, sl.dtype)
    direct = sub._DIRECT.get(key)
    if direct is None:
        print("the submission did not take its direct Gluon launch here", file=sys.stderr)
        return 1
    stream = torch.cuda.current_stream(q.device).cuda_stream
    rest = g.other_arguments(q, rp, ci, sl, o, lse, sub.QK_SCALE, sub.GLUON_STAGES)
    B, H, T, _ = q.shape
    steps = {
        "torch.empty_like(q)": lambda: torch.empty_like(q),
        "torch.empty lse": lambda: torch.empty((B, H, T), device=q.device, dtype=torch.float32),
        "q.new_empty lse": lambda: q.new_empty((B, H, T), dtype=torch.float32),
        "3 x .contiguous()": lambda: (rp.contiguous(), ci.contiguous(), sl.contiguous()),
        "supported(q, k, v)": lambda: g.supported(q, k, v),
        "torch.cuda.get_device_capability": lambda: torch.cuda.get_device_capability(q.device),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream(q.device).cuda_stream,
        "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(q.device.index),
        "grid(q)": lambda: g.grid(q),
        "other_arguments": lambda: g.other_arguments(q, rp, ci, sl, o, lse, sub.QK_SCALE, sub.GLUON_STAGES),
        "direct launch": lambda: direct(g.grid(q), stream, q, k, v, o, rest),
        "the whole call": lambda: sub.block_sparse_attn_fwd(q, k, v, rp, ci, sl),
    }
    print(f"{args.submission}: median return of {CALLS} calls, us")
    for name, fn in steps.items():
        times = []
        for i in range(CALLS):
            if i % 50 == 0:
                torch.cuda.synchronize()   # keeps the launch queue short
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        print(f"  {name:42s} {statistics.median(times) * 1e6:8.2f}")
    c.unload(entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
