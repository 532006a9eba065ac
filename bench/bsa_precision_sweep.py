"""block_sparse_attn: how often does the bundled kernel miss the o/lse tolerance on fresh seeds?

    python bench/bsa_precision_sweep.py [--seeds 20] [--cases full-window-1,full-retrieval-1]

Per variant of the kernel (P split in two bf16 parts for every block, the bundled default
``SPLIT_ALL = True``; P rounded to bf16 off the diagonal) and per case: the timed-call inputs
kbench makes (generate_timed) on fresh seeds, the task's ground truth and checker; prints the
calls that failed, the worst |err| / tolerance over all elements, and the kernel's median
time by kbench's own protocol for one call (kbench.call_timer.CallTimer, 20 calls).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.tasks import get_task  # noqa: E402


def worst_ratio(out, ref, atol, rtol) -> float:
    a, b = out.float(), ref.float()
    ok = torch.isfinite(b)
    return float(((a - b).abs() / (atol + rtol * b.abs()))[ok].max())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--cases", default="full-window-1,full-retrieval-1,full-global-1")
    args = ap.parse_args()
    from kbench.call_timer import CallTimer
    from kbench.interface import same_inputs
    from kbench.timing import flush_bytes, summarize

    timer = CallTimer("cuda", flush_bytes("cuda"))
    task = get_task("block_sparse_attn")
    m = task.module
    entry = task.contract.load(ROOT / "submissions" / "block_sparse_attn")
    sub = sys.modules[entry.fn.__module__]
    cases = {c.name: c for c in task.suite("full").cases}
    for variant in (False, True):
        sub.SPLIT_ALL = variant
        for name in args.cases.split(","):
            case = cases[name]
            params = dict(case.params, seed=case.seed)
            fails, worst = 0, 0.0
            for i in range(args.seeds):
                inputs = m.generate_timed(params, "cuda", 7919 * (i + 1))
                ref_o, ref_lse = m.reference(inputs)
                o, lse = entry.fn(*(inputs[k] for k in ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")))
                fails += not m.check((o, lse), (ref_o, ref_lse), inputs).passed
                worst = max(worst, worst_ratio(o, ref_o, **m.O_TOL))
            samples = [timer.timed(lambda a: task.contract.call(entry, a), same_inputs, inputs)[1].device_ms
                       for _ in range(22)][2:]   # the first two: the variant's compilation
            print(f"split_all={variant!s:5s} {name:18s} failed {fails}/{args.seeds} calls, worst |err|/tol "
                  f"{worst:.3f}, {summarize(samples).median * 1e3:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
