"""In a run over several GPUs, one unit's workers load at a time, host-wide.

Creating a CUDA context is serialized across the host, not per GPU. Measured on an
nvidia-h200-x2 host (docs/scale-out.md, "Where a unit's start goes"): one process's context
took 0.30 s; 16 processes' at once on one GPU 2.5 s; 16 on each of two GPUs 6.4 s, as long as
32 on one. So two per-GPU children loading a unit's workers (16 for qknorm) at the same time
both wait ~6.4 s; one after the other, the first is ready at ~3.2 s and times its cases while
the second loads, and from then on each GPU's load overlaps the other's timed cases, not its
load.

The gate is a file lock (flock) that the children of one ``kbench eval --gpus`` share
(kbench/gpu_slots.py makes the file). A unit holds it from its workers' start until each has
answered (ready or failed) or died. Both waits are bounded (HOLD_S): a load that hangs, or
anything else holding the file, delays the other GPUs' units by HOLD_S at most and never
stops them.
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager

HOLD_S = 60.0
ENV = "KBENCH_LOAD_GATE"   # the file's path, in a per-GPU child's environment


@contextmanager
def held(path: str | None, wait_s: float = HOLD_S):
    """The gate for the ``with`` block: after at most ``wait_s`` of waiting, the block runs anyway."""
    if path is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)   # releases the lock with it


def wait_loaded(conns, hold_s: float = HOLD_S) -> None:
    """Until every worker connection has its first reply waiting (ready or failed) or is closed
    (the worker died), or ``hold_s`` has passed. Reads nothing: the runner takes the replies."""
    deadline = time.monotonic() + hold_s
    for conn in conns:
        try:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                return
        except (OSError, EOFError, ValueError):
            continue   # closed: not loading any more
