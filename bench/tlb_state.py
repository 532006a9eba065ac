"""How much a kernel's time under kbench's protocol depends on the GPU's address-translation (TLB)
state, which the L2 flush does not touch.

    python3 bench/tlb_state.py TASK [--suite quick] [--cases a,b] [--sizes 0,0.25,1,4,16] [--calls 40]
        [--no-baseline]
    (after `source bench/gpu_env.sh`; a GPU is needed)

Per case, the task's first baseline and the bundled submission loaded in this process (as
bench/crosscheck.py does), each call timed by kbench.call_timer.CallTimer (staging, gate, L2
flush, events) right after an untimed call of its own (so its inputs' translations are cached)
and a sweep that reads one byte in every 2 MB of the first S GB of a buffer kept for the
purpose: a few kilobytes of traffic that replaces the cached translations. S = 0: nothing
between the two calls. Sizes and targets interleave in a shuffled order. Prints the median and quartiles per target and size, and the ratio to S = 0.
Figures: docs/measurement.md, "Address translation".
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from crosscheck import Plain, set_up  # noqa: E402  (bench/ is the script's folder)
from kbench.runner import Options, Runner  # noqa: E402
from kbench.tasks import get_task, submission_file  # noqa: E402

PAGE = 2 << 20
WARMUP_ROUNDS = 5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: the suite's first)")
    ap.add_argument("--sizes", default="0,0.25,1,4,16", help="GB swept before each call, comma-separated")
    ap.add_argument("--calls", type=int, default=40, help="timed calls per target and size")
    ap.add_argument("--no-baseline", action="store_true", help="the submission alone in this process")
    args = ap.parse_args()
    sizes = [float(x) for x in args.sizes.split(",")]
    task = get_task(args.task)
    targets = [Plain("submission", task, submission_file(task, ROOT / "submissions" / args.task))]
    baselines = task.baselines("cuda")
    if baselines and not args.no_baseline:
        targets.insert(0, Plain(f"baseline {next(iter(baselines))}", task, next(iter(baselines.values()))))
    cases = task.suite(args.suite).cases
    cases = [c for c in cases if c.name in args.cases.split(",")] if args.cases else cases[:1]
    set_up(task, targets, cases)
    sweep_buf = torch.zeros(int(max(sizes) * (1 << 30)) or PAGE, dtype=torch.uint8, device="cuda")
    sink = torch.zeros((), dtype=torch.int64, device="cuda")
    rng = random.Random(11)
    for case in cases:
        inputs = Runner(task, Options(device="cuda"))._make(case, 0)[0]
        res = {(t.label, s): [] for t in targets for s in sizes}
        for rnd in range(args.calls + WARMUP_ROUNDS):
            order = list(res)
            rng.shuffle(order)
            for label, size in order:
                target = next(t for t in targets if t.label == label)
                target.timer.timed(target.invoke, target.prepare, inputs)   # its own translations cached again
                if size:
                    sink.add_(sweep_buf[:int(size * (1 << 30)):PAGE].sum(dtype=torch.int64))
                torch.cuda.synchronize()
                ms = target.timer.timed(target.invoke, target.prepare, inputs)[1].device_ms
                if rnd >= WARMUP_ROUNDS:
                    res[(label, size)].append(ms * 1e3)
        print(f"{case.name}: median us (q1-q3) of {args.calls} calls per target and size, interleaved")
        for t in targets:
            base = statistics.median(res[(t.label, sizes[0])])
            for s in sizes:
                v = res[(t.label, s)]
                q = statistics.quantiles(v, n=4)
                print(f"  {t.label:28s} sweep {s:6.2f} GB  {statistics.median(v):10.2f}  ({q[0]:.2f}-{q[2]:.2f})"
                      f"  x{statistics.median(v) / base:.4f}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
