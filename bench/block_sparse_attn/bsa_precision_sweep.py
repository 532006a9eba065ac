"""block_sparse_attn: how often does the bundled kernel miss the o/lse tolerance on fresh seeds?

    python bench/block_sparse_attn/bsa_precision_sweep.py [--suite full] [--seeds 20]
        [--cases all|full-window-1,...] [--variants "PV_MODE=fp16,DIAG_MODE=fp16;PV_MODE=split"]
        [--time-limit 300] [--no-timing]

(on the GPU host, from the repository root, after `source bench/gpu_env.sh`.)

Per variant of the kernel (a ';'-separated list of module constants of the submission to set,
e.g. PV_MODE=split: P in two bf16 parts; PV_MODE=fp16: P and V in fp16; PV_MODE=bf16: P
rounded to bf16; the empty variant is the bundled default) and per case: the timed-call inputs
kbench makes (generate_timed) on fresh seeds, the task's ground truth and checker; prints the
calls that failed, the worst |err| / tolerance over all elements, how many elements had
|err| / tol above 0.5 (the tail: a 1-ulp bf16 disagreement at |o| >= 0.5 is ~0.4-0.8), and
the kernel's median time by kbench's own protocol for one call (kbench.worker.timer.CallTimer,
20 calls) unless --no-timing. Seeds are taken round-robin over the cases, so a --time-limit
stop leaves every case about equally covered. The figures behind the `PV_MODE` comment in
submission.py came from this script.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]   # the repository
sys.path.insert(0, str(ROOT))
from call_median import median_ms

from kbench.tasks.task import get_task

ARGS = ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")


def ratios(out, ref, atol, rtol):
    a, b = out.float(), ref.float()
    ok = torch.isfinite(b)
    r = ((a - b).abs() / (atol + rtol * b.abs()))[ok]
    return float(r.max()), int((r > 0.5).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="full")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--cases", default="all")
    ap.add_argument("--variants", default="")
    ap.add_argument("--time-limit", type=float, default=1e9, help="seconds; stops after a full round")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--seed-base", type=int, default=0, help="the same base gives every variant the same seeds")
    args = ap.parse_args()
    from kbench.run.card import flush_bytes
    from kbench.worker.timer import CallTimer

    timer = CallTimer("cuda", flush_bytes("cuda"))
    task = get_task("block_sparse_attn")
    m = task.module
    entry = task.contract.load(ROOT / "submissions" / "block_sparse_attn")
    sub = sys.modules[entry.fn.__module__]
    bundled = {n: getattr(sub, n) for n in ("PV_MODE", "DIAG_MODE", "REVERSE", "TMA", "WS") if hasattr(sub, n)}
    print(f"{torch.cuda.get_device_name()}  bundled {bundled}", flush=True)
    cases = [c for c in task.suite(args.suite).cases if args.cases == "all" or c.name in args.cases.split(",")]
    for variant in args.variants.split(";"):
        for name, value in bundled.items():
            setattr(sub, name, value)
        for item in filter(None, variant.split(",")):
            name, value = item.split("=")
            setattr(sub, name, bool(int(value)) if value.isdigit() else value)
        label = variant or "bundled"
        stats = {c.name: [0, 0, 0.0, 0] for c in cases}   # calls, failed, worst ratio, elements > 0.5
        start = time.perf_counter()
        for i in range(args.seeds):
            if time.perf_counter() - start > args.time_limit:
                break
            for n, case in enumerate(cases):
                params = dict(case.params, seed=case.seed)
                inputs = m.generate_timed(params, "cuda", 7919 * (i + 1) + 1000003 * n + args.seed_base)
                expected = m.reference(inputs)
                out = entry.fn(*(inputs[k] for k in ARGS))
                st = stats[case.name]
                st[0] += 1
                st[1] += not m.check(out, expected, inputs).passed
                worst, tail = ratios(out[0], expected[0], **m.O_TOL)
                st[2] = max(st[2], worst)
                st[3] += tail
                del inputs, expected, out
        total = [0, 0, 0.0, 0]
        for case in cases:
            st = stats[case.name]
            total = [total[0] + st[0], total[1] + st[1], max(total[2], st[2]), total[3] + st[3]]
            timing = ""
            if not args.no_timing:
                inputs = m.generate_timed(dict(case.params, seed=case.seed), "cuda", 1)
                timing = f", {median_ms(timer, lambda a: task.contract.call(entry, a), inputs, 20) * 1e3:.1f} us"
            print(f"{label:32s} {case.name:20s} failed {st[1]}/{st[0]} calls, worst |err|/tol {st[2]:.3f}, "
                  f"{st[3]} elements > 0.5 tol{timing}", flush=True)
        print(f"{label:32s} TOTAL {args.suite}: failed {total[1]}/{total[0]} calls, worst |err|/tol {total[2]:.3f}, "
              f"{total[3]} elements > 0.5 tol, {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
