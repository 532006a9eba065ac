"""block_sparse_attn: are two Gluon kernels' outputs the same bits? For a change meant to keep the
numbers (scheduling, launch, stores), not a tolerance check.

    python bench/block_sparse_attn/bsa_bitwise.py A_DIR B_DIR [--suites smoke,local-dev,quick,full,broad]
        [--calls 3]

(on the GPU host, from the repository root; e.g. A_DIR submissions/block_sparse_attn, B_DIR a copy
holding the change.)

A_DIR and B_DIR each hold a bsa_gluon.py (a submission directory). Per case of each suite: the
case's seed inputs (the task's generator), A's launch once, B's launch --calls times into buffers
filled with junk first; o and lse compared with torch.equal. Prints one line per case and the
count of mismatches; exits 1 if any.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the repository
sys.path.insert(0, str(ROOT))

import torch
from bsa_case import QK_SCALE, kernel_inputs

from kbench.tasks.interface import load_module
from kbench.tasks.task import get_task


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--suites", default="smoke,local-dev,quick,full,broad")
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    a = load_module(Path(args.a) / "bsa_gluon.py", "bsa_gluon_a")
    b = load_module(Path(args.b) / "bsa_gluon.py", "bsa_gluon_b")
    task = get_task("block_sparse_attn")
    bad = 0
    for suite in args.suites.split(","):
        for case in task.suite(suite).cases:
            q, k, v, rp, ci, sl = kernel_inputs(task, case)
            if not (a.supported(q, k, v) and b.supported(q, k, v)):
                print(f"{case.name}: not supported by both kernels, skipped")
                continue
            o_a, lse_a = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda")
            a.launch(q, k, v, rp, ci, sl, o_a, lse_a, QK_SCALE)
            same = []
            for _ in range(args.calls):
                o_b, lse_b = torch.full_like(q, 7.0), torch.full(q.shape[:3], 7.0, device="cuda")
                b.launch(q, k, v, rp, ci, sl, o_b, lse_b, QK_SCALE)
                torch.cuda.synchronize()
                same.append(torch.equal(o_a, o_b) and torch.equal(lse_a, lse_b))
            bad += not all(same)
            print(f"{case.name}: {'equal' if all(same) else 'DIFFERENT'} ({sum(same)}/{len(same)} calls)", flush=True)
            del q, k, v, o_a, o_b
            torch.cuda.empty_cache()
    print(f"cases with different outputs: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
