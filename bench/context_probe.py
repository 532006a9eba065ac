"""How long fresh processes take to start on this host when many start at once, as a run's
workers do: per wave, N processes per GPU started together, each timing its torch import, its
first CUDA tensor (the context: CUDA's start-up, the caching allocator) and Triton's cache key.

    python3 bench/context_probe.py                       # waves 1@0 1@0 16@0 16@0,1 32@0
    python3 bench/context_probe.py --waves 8@0 8@0,1

A wave is COUNT@GPUS: COUNT processes on each GPU of the comma-separated list, all at once.
Median and largest time per step over the wave's processes, and the wave's wall. Whether the
contexts' time grows with the processes per GPU or with the processes on the host says what a
second GPU can and cannot take off a run's start-up (docs/scale-out.md, "Where a unit's start
goes").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, time
t0 = time.time()
import torch
t1 = time.time()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
t2 = time.time()
try:
    from triton.runtime.cache import triton_key
except ImportError:
    from triton.compiler.compiler import triton_key
triton_key()
t3 = time.time()
print(json.dumps({"torch": t1 - t0, "context": t2 - t1, "triton": t3 - t2}))
"""
STEPS = ("torch", "context", "triton")


def wave(count: int, gpus: list[int]) -> str:
    began = time.time()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": str(g)})
             for g in gpus for _ in range(count)]
    rows = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.time() - began
    parts = []
    for step in STEPS:
        values = sorted(r[step] for r in rows)
        parts.append(f"{step} {values[len(values) // 2]:.2f}/{values[-1]:.2f}")
    return f"{count} per GPU on {','.join(map(str, gpus))} ({len(rows)} in all): wall {wall:.2f} s; " \
           f"median/largest s: " + "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waves", nargs="+", default=["1@0", "1@0", "16@0", "16@0,1", "32@0"],
                    help="COUNT@GPUS, e.g. 16@0,1: 16 processes on each of GPUs 0 and 1 at once")
    for text in ap.parse_args().waves:
        count, gpus = text.split("@")
        print(wave(int(count), [int(g) for g in gpus.split(",")]), flush=True)


if __name__ == "__main__":
    main()
