"""Where a bundled kernel's host path goes: enqueue time with the device busy, the native call, cProfile.

    python bench/host_probe.py TASK CASE[,CASE...] [--suite S] [--profile N]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("cases")
    ap.add_argument("--suite", default="full")
    ap.add_argument("--profile", type=int, default=30)
    ap.add_argument("--submission", type=Path, default=None)
    a = ap.parse_args()
    import torch
    from kbench.tasks.task import get_task, submission_file
    task = get_task(a.task)
    contract, module = task.contract, task.module
    cases = [c for c in task.suite(a.suite).cases if c.name in a.cases.split(",")]
    entry = contract.load(submission_file(task, a.submission or ROOT / "submissions" / a.task))
    setup = getattr(contract, "setup", None)
    if setup is not None:
        setup(entry, [dict(c.params) for c in cases], "cuda")
    prepare = getattr(contract, "prepare", lambda x: x)
    with torch.no_grad():
        for case in cases:
            inputs = module.generate(dict(case.params), "cuda")
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(10):
                contract.call(entry, prepare(inputs))
            torch.cuda.synchronize()
            busy, native, ret, dev = [], [], [], []
            for _ in range(40):
                args = prepare(inputs)
                torch.cuda.synchronize()
                torch.cuda._sleep(20_000_000)   # ~10 ms: the whole call is enqueued before it runs
                start.record()
                t0 = time.perf_counter()
                out = contract.call(entry, args)
                busy.append((time.perf_counter() - t0) * 1e6)
                end.record()
                torch.cuda.synchronize()
                dev.append(start.elapsed_time(end) * 1e3)
                del out
                args = prepare(inputs)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = contract.call(entry, args)
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                ret.append((t1 - t0) * 1e6)
                native.append((t2 - t0) * 1e6)
                del out
            med = statistics.median
            print(f"{case.name}: enqueue(busy) {med(busy):.1f} us  device {med(dev):.1f} us  "
                  f"native return {med(ret):.1f} us  native total {med(native):.1f} us", flush=True)
            if a.profile:
                prof = cProfile.Profile()
                for _ in range(a.profile):
                    args = prepare(inputs)
                    torch.cuda.synchronize()
                    torch.cuda._sleep(20_000_000)
                    prof.enable()
                    out = contract.call(entry, args)
                    prof.disable()
                    torch.cuda.synchronize()
                    del out
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
                print("\n".join(s.getvalue().splitlines()[:40]))
            del inputs
    return 0


if __name__ == "__main__":
    sys.exit(main())
