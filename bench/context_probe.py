"""How long fresh processes take to start on this host when many start at once, as a run's
workers do: per wave, N processes per GPU started together, each timing its torch import, its
first CUDA tensor (the context: CUDA's start-up, the caching allocator) and Triton's cache key.
With ``--driver`` the context is split in the driver's own steps (cuInit; the primary context
retained and made current; torch's first tensor in it) and each process's exit is timed too
(from its last line to the parent reaping it: the context's teardown).

    python3 bench/context_probe.py                       # waves 1@0 1@0 16@0 16@0,1 32@0
    python3 bench/context_probe.py --waves 8@0 8@0,1
    python3 bench/context_probe.py --driver --env CUDA_DEVICE_MAX_CONNECTIONS=1

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

DRIVER_CHILD = r"""
import ctypes, json, time
t0 = time.time()
import torch
t1 = time.time()
cuda = ctypes.CDLL("libcuda.so.1")
def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what}: CUresult {rc}")
check(cuda.cuInit(0), "cuInit")
t2 = time.time()
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
t3 = time.time()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
t4 = time.time()
print(json.dumps({"torch": t1 - t0, "cuinit": t2 - t1, "ctx": t3 - t2, "first_tensor": t4 - t3,
                  "end": time.time()}), flush=True)
"""
DRIVER_STEPS = ("torch", "cuinit", "ctx", "first_tensor", "exit")


def wave(count: int, gpus: list[int], driver: bool = False, env: dict | None = None) -> str:
    began = time.time()
    procs = [subprocess.Popen([sys.executable, "-c", DRIVER_CHILD if driver else CHILD], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, **(env or {}), "CUDA_VISIBLE_DEVICES": str(g)})
             for g in gpus for _ in range(count)]
    reaped = {}
    while len(reaped) < len(procs):   # each one's exit as it happens, not in the order started
        pid, _ = os.wait()
        reaped[pid] = time.time()
    rows = []
    for p in procs:
        p.returncode = 0   # reaped above
        row = json.loads(p.stdout.read())
        if driver:
            row["exit"] = reaped[p.pid] - row.pop("end")
        rows.append(row)
    wall = time.time() - began
    parts = []
    for step in (DRIVER_STEPS if driver else STEPS):
        values = sorted(r[step] for r in rows)
        parts.append(f"{step} {values[len(values) // 2]:.2f}/{values[-1]:.2f}")
    return f"{count} per GPU on {','.join(map(str, gpus))} ({len(rows)} in all): wall {wall:.2f} s; " \
           f"median/largest s: " + "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waves", nargs="+", default=["1@0", "1@0", "16@0", "16@0,1", "32@0"],
                    help="COUNT@GPUS, e.g. 16@0,1: 16 processes on each of GPUs 0 and 1 at once")
    ap.add_argument("--driver", action="store_true", help="time the driver's steps and each process's exit")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="for every probe process")
    args = ap.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    if env:
        print("env:", " ".join(args.env), flush=True)
    for text in args.waves:
        count, gpus = text.split("@")
        print(wave(int(count), [int(g) for g in gpus.split(",")], args.driver, env), flush=True)


if __name__ == "__main__":
    main()
