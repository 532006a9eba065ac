"""Probe: where the bundled mla_decode call's host time goes under kbench's CallTimer (the state kbench's
host column sees): stamps between the steps of the lean path, medians over timed calls.
    python probe/host_steps.py [--cases prefill128,prefill6144] [--calls 40] [--submission DIR]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch

from kbench.run.card import flush_bytes
from kbench.tasks.task import get_task, submission_file
from kbench.worker.timer import CallTimer

STAMPS: list = []


def stamp(label):
    STAMPS.append((label, time.perf_counter()))


class TorchProxy:
    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        value = getattr(self._real, name)
        if name in ("empty", "mm"):
            def wrapped(*a, **k):
                out = value(*a, **k)
                stamp(name)
                return out
            return wrapped
        return value


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="prefill128,prefill6144")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--submission", default=str(ROOT / "submissions" / "mla_decode"))
    args = ap.parse_args()
    task = get_task("mla_decode")
    contract, module = task.contract, task.module
    entry = contract.load(submission_file(task, Path(args.submission)))
    sub = sys.modules[entry.__module__]
    sub.torch = TorchProxy(torch)
    layout, step, attend = sub._layout, sub._Lean._step, sub._Lean._attend

    def layout_s(*a):
        out = layout(*a)
        stamp("layout")
        return out

    def step_s(self, ws, stream, name, *a, **k):
        out = step(self, ws, stream, name, *a, **k)
        stamp(name)
        return out

    def attend_s(self, *a):
        out = attend(self, *a)
        stamp("attend")
        return out
    sub._layout, sub._Lean._step, sub._Lean._attend = layout_s, step_s, attend_s

    def call(a):
        stamp("enter")
        out = contract.call(entry, a)
        stamp("return")
        return out

    timer = CallTimer("cuda", flush_bytes("cuda"))
    suite = task.suite("full")
    decode = task.suite("decode")
    with torch.no_grad():
        for name in args.cases.split(","):
            case = next(c for c in (*suite.cases, *decode.cases) if c.name == name)
            inputs = module.generate(dict(case.params), "cuda")
            hosts, segs = [], {}
            for i in range(args.calls + 3):
                STAMPS.clear()
                _, sample = timer.timed(call, contract.prepare, inputs)
                if i < 3:
                    continue
                hosts.append(sample.host_ms * 1e3)
                last = max(j for j, (label, _) in enumerate(STAMPS) if label == "enter")
                seq = STAMPS[last:]
                for (a, ta), (b, tb) in zip(seq, seq[1:]):
                    segs.setdefault(f"{a}->{b}", []).append((tb - ta) * 1e6)
            print(f"{name}: host (CallTimer) median {statistics.median(hosts):.1f} us, "
                  f"min {min(hosts):.1f}, max {max(hosts):.1f}")
            for k, v in segs.items():
                print(f"   {k:<22} {statistics.median(v):7.1f} us  (min {min(v):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
