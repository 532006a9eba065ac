"""No timed worker's CUDA context is the last one made on its GPU.

Measured on one H200 (docs/measurement.md, "A lone CUDA context"): a process whose CUDA context
was the last made on the GPU read qknorm's flashinfer baseline 2.6-4.3% slower, and its bundled
kernel 1.1-5.1% slower, until another process made a context there. Even one that exited at
once did it, and the process read the faster figure for the rest of its life; waiting did not.
The context this module makes does it as a torch process's did.
The driver's mechanism is unknown. Which of a run's contexts came last (a worker's, the parent's)
was an accident of start-up order, so before a case's timed calls, when one of its workers
started since the last time, the runner has a short-lived process make a context on the same
GPU and exit. That process goes through the driver API alone (no torch import): it retains the
device's primary context, as torch does, allocates and clears 1 MiB, synchronizes, and prints
the card's UUID, so a run can show which GPU it touched.
"""
from __future__ import annotations

import subprocess
import sys
import time

_MAKE_CONTEXT = r"""
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
def ok(what, rc):
    if rc:
        sys.exit(f"{what} returned CUresult {rc}")
dev, ctx, ptr, size = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_size_t(1 << 20)
ok("cuInit", cu.cuInit(0))
ok("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), int(sys.argv[1])))
ok("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
ok("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
ok("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), size))
ok("cuMemsetD8", cu.cuMemsetD8_v2(ptr, ctypes.c_ubyte(0), size))
ok("cuCtxSynchronize", cu.cuCtxSynchronize())
uuid = ctypes.create_string_buffer(16)
ok("cuDeviceGetUuid", cu.cuDeviceGetUuid_v2(uuid, dev))
print(uuid.raw.hex())
"""


class OtherContextError(RuntimeError):
    pass


def make_and_exit(ordinal: int = 0, timeout: float = 60.0) -> dict:
    """Another process makes a CUDA context on device ``ordinal`` (as this process numbers its
    devices: it inherits CUDA_VISIBLE_DEVICES) and exits. Returns {"uuid": the card's UUID,
    "seconds": how long it took}; raises OtherContextError if it could not."""
    began = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", _MAKE_CONTEXT, str(ordinal)],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OtherContextError(str(exc).splitlines()[0]) from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout or f"exit status {proc.returncode}").strip().splitlines()
        raise OtherContextError(lines[-1])
    raw = proc.stdout.strip()
    uuid = f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"
    return {"uuid": uuid, "seconds": round(time.perf_counter() - began, 3)}


def unfollowed(members) -> list:
    """The workers (kbench/targets.Target) started since another context last came after them."""
    return [m for m in members if m.readied and m.worker.alive and not m.context_followed]


def follow(members, make=make_and_exit) -> dict | None:
    """When any of ``members`` (every worker of the case's targets, each loaded: its context
    exists) has no context made after its own, ``make`` one and mark them all. Returns what
    ``make`` returned with "workers": how many it followed, or None when none needed it. Raises
    OtherContextError as ``make`` does; they are then left unmarked."""
    waiting = unfollowed(members)
    if not waiting:
        return None
    made = make()
    for m in waiting:
        m.context_followed = True
    return {**made, "workers": len(waiting)}
