"""mla_decode: how long the whole call takes to return on the host, and its synchronized wall time.

    python3 submissions/mla_decode/dev/mla_decode_host.py DIR [DIR ...] [--case prefill128] [--calls 300]
        [--rounds 4]

(on the GPU host, from the repository root, after `source bench/gpu_env.sh`; DIR a submission
folder: the bundled one, a copy holding a change). Per round, each DIR in turn in a fresh process: the case's inputs
made once, 30 calls of warm-up, then per call: prepare the cache (outside the clock), synchronize,
host clock, the call, host clock (its return), synchronize, host clock (the wall time the original's
protocol sees, without its statistics). Prints the medians per process. The host's speed drifts by
up to 2x between processes on the H200 host, so the directories alternate round by round and are
compared pair by pair. kbench itself times the device, not this; the host column of
submissions/mla_decode/README.md is kbench's `host_ms`.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]   # the repository


def measure(path: Path, case: str, calls: int) -> tuple[float, float]:
    """(host return median, wall median) in us of ``calls`` calls of the submission at ``path``."""
    import torch
    sys.path.insert(0, str(ROOT))
    from kbench.tasks.task import get_task

    task = get_task("mla_decode")
    module, contract = task.module, task.contract
    params = dict(next(c for c in task.suite("full").cases if c.name == case).params)
    inputs = module.generate(params, "cuda")
    entry = contract.load(path)
    host, wall = [], []
    with torch.no_grad():
        for _ in range(30):
            contract.call(entry, contract.prepare(inputs))
            torch.cuda.synchronize()
        for _ in range(calls):
            args = contract.prepare(inputs)
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            contract.call(entry, args)
            t1 = time.perf_counter_ns()
            torch.cuda.synchronize()
            t2 = time.perf_counter_ns()
            host.append((t1 - t0) / 1e3)
            wall.append((t2 - t0) / 1e3)
    return statistics.median(host), statistics.median(wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--case", default="prefill128")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one directory
    args = ap.parse_args()
    if args.one:
        host, wall = measure(args.dirs[0], args.case, args.calls)
        print(f"{host:.1f} {wall:.1f}")
        return 0
    print(f"{'round':<6} {'submission':<32} {'returns us':>11} {'wall us':>9}")
    for r in range(1, args.rounds + 1):
        for d in args.dirs:
            done = subprocess.run([sys.executable, __file__, str(d), "--one", "--case", args.case,
                                   "--calls", str(args.calls)], capture_output=True, text=True, check=False)
            if done.returncode:
                print(f"{r:<6} {d!s:<32} failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            host, wall = done.stdout.split()
            print(f"{r:<6} {d!s:<32} {float(host):11.1f} {float(wall):9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
