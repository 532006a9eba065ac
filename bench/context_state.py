"""Does a process's figure depend on other CUDA contexts made on the GPU after its own? One
target of a task through kbench's protocol in one plain process (crosscheck.py's loop), in
phases, with and without kbench's interlude.

    python3 bench/context_state.py [TASK] [--target baseline] [--cases a,b] [--budget 2]
    (after `source bench/gpu_env.sh`; a GPU is needed)

Phases, in this order, each timing every case with the interlude and without:
1. alone: no context made on the GPU since this process's own;
2. after kbench's other context (kbench/other_context.py: another process makes one through the
   driver API and exits, as a run does before its timed calls);
3. after a torch process made a context and exited;
4. with another process's context open, idle;
5. alone again, after it exited.
On one H200 qknorm's flashinfer baseline read 3-3.6% faster once a torch process had made a
context, for the rest of the process's life; 12 s of waiting changed nothing and the SM clock
stayed at 1980 MHz (docs/measurement.md, "A lone CUDA context"). Phase 2 against phase 1 is
whether kbench's driver-only context does the same; phase 3 against phase 2, whether it leaves
anything for a torch context to do.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import crosscheck as cc  # noqa: E402  (bench/ is the script's folder)
from kbench import other_context  # noqa: E402
from kbench.tasks import get_task, submission_file  # noqa: E402
from kbench.timing import StopRule  # noqa: E402

IDLE_CONTEXT = ("import torch, time; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); "
                "print('up', flush=True); time.sleep(600)")


def open_torch_context() -> subprocess.Popen:
    """Another process with a CUDA context made by torch on this GPU, open until killed."""
    proc = subprocess.Popen([sys.executable, "-c", IDLE_CONTEXT], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "up":
        raise SystemExit("the other process could not make a CUDA context")
    return proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", nargs="?", default="qknorm")
    ap.add_argument("--target", choices=("baseline", "submission"), default="baseline")
    ap.add_argument("--cases", default="kv8_q32_d128_b1,kv32_q32_d64_b16")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per case and variant (the stop rule's)")
    args = ap.parse_args()
    task = get_task(args.task)
    if args.target == "baseline":
        path = next(iter(task.baselines("cuda").values()))
    else:
        path = submission_file(task, ROOT / "submissions" / args.task)
    target = cc.Plain(args.target, task, path)
    cases = [c for c in task.suite(args.suite).cases if c.name in args.cases.split(",")]
    if not cases:
        raise SystemExit(f"none of {args.cases} is in {args.task}'s {args.suite} suite")
    cc.set_up(task, [target], cases)
    interlude = target.timer.interlude
    stop = StopRule(budget_s=args.budget, noise=0.003)

    def measure(phase: str) -> None:
        for case in cases:
            for name, between in (("interlude", interlude), ("none", None)):
                target.timer.interlude = between
                r = cc.run_case(task, case, [target], stop)[target.label]
                print(f"{phase:40s} {case.name:24s} {name:9s} {r['median_ms'] * 1e3:9.2f} us "
                      f"[{r['ci95_ms'][0] * 1e3:.2f}, {r['ci95_ms'][1] * 1e3:.2f}] n={r['n']}", flush=True)

    measure("alone")
    made = other_context.make_and_exit(torch.cuda.current_device())
    print(f"kbench's other context: {made['seconds']:.2f} s on {made['uuid']}", flush=True)
    measure("after kbench's other context")
    proc = open_torch_context()
    proc.kill()
    proc.wait()
    measure("after a torch context came and went")
    proc = open_torch_context()
    measure("with another context open")
    proc.kill()
    proc.wait()
    measure("alone again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
