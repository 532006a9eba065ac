"""Does a kernel's time drift inside ONE plain process? Rounds over a suite with kbench's
per-call protocol (bench/crosscheck.py's loop: gate, flush, events), one line per round: the
geomean of the submission's and the baseline's medians, each case's submission median, and
nvidia-smi's temperature, SM clock and power.

    python bench/drift.py qknorm --suite quick --rounds 6 --budget 1.0
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("crosscheck", ROOT / "bench" / "crosscheck.py")
crosscheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crosscheck)   # it puts the repository on sys.path
from kbench.records import geomean  # noqa: E402


def smi() -> str:
    return subprocess.run(["nvidia-smi", "--query-gpu=temperature.gpu,clocks.sm,power.draw",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds a case a round")
    ap.add_argument("--noise", type=float, default=0.003)
    args = ap.parse_args()
    task = crosscheck.get_task(args.task)
    sub = crosscheck.Plain("submission", task, crosscheck.submission_file(task, ROOT / "submissions" / args.task))
    targets = [sub]
    baselines = task.baselines("cuda")
    if baselines:
        targets.insert(0, crosscheck.Plain("baseline", task, next(iter(baselines.values()))))
    cases = task.suite(args.suite).cases
    crosscheck.set_up(task, targets, cases)
    stop = crosscheck.StopRule(budget_s=args.budget, noise=args.noise)
    began = time.time()
    for r in range(args.rounds):
        rows = [crosscheck.run_case(task, c, targets, stop) for c in cases]
        figures = {t.label: 1e3 * geomean([row[t.label]["median_ms"] for row in rows]) for t in targets}
        print(f"t={time.time() - began:6.1f}s round {r} "
              + " ".join(f"{k} {v:.4f} us" for k, v in figures.items())
              + f" spin clock {rows[0]['submission']['clock_mhz']} MHz | "
              + " ".join(f"{1e3 * row['submission']['median_ms']:.3f}" for row in rows) + f" | {smi()}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
