"""A worker's environment: kbench's, not the shell's (importable without torch).

A variable exported for debugging or for another program can change what a timed call's figure
means without failing anything. Measured on one H200 before kbench removed them
(docs/measurement.md, "The workers' environment"):
- TORCH_COMPILE_DISABLE=1: block_sparse_attn quick scored 517x instead of 1.83x, every case
  passed: its FlexAttention baseline ran eager instead of compiled;
- CUDA_LAUNCH_BLOCKING=1: qknorm quick read 16x slower, mla_decode quick 4.9x, every case passed,
  and the only sign was a note blaming the calls for waiting on the device;
- TRITON_DEBUG=1: block_sparse_attn quick 1.54x the time; TRITON_DEFAULT_FP_FUSION=0: 1.04x;
- PYTORCH_NO_CUDA_MEMORY_CACHING=1: kbench died with a traceback (torch cannot share such memory
  with another process);
- PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: qknorm quick 1.037x the time, SLOWER;
- CUDA_DEVICE_MAX_CONNECTIONS=1: two of the side-stream checks stopped seeing what they look for.
- TORCHINDUCTOR_MAX_AUTOTUNE=1: block_sparse_attn quick scored 1.66x instead of 1.84x, the
  submission's own times unchanged: its FlexAttention baseline, which the task compiles with
  torch.compile's defaults (reference/block_sparse_attn/baseline_flex.py), was autotuned.
TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 moved nothing there, and Inductor's other autotuning
variables were not measured; they go with MAX_AUTOTUNE, since they choose the same kernels.
TRITON_F32_DEFAULT and TRITON_KERNEL_OVERRIDE were not measured: by Triton's own definition
(triton/knobs.py) they change every fp32 dot's precision, or swap compiled kernels for files.

So the `kbench` command takes them out of its own process first (kbench/cli/main.py, before it
starts any worker or GPU child, which inherit that), the workers' fork server is started without
them, each worker takes them out again first thing (kbench used as a library, a Ray node's own
environment), and the run says which it did not pass on. ``--cuda-connections`` is the way to
set CUDA_DEVICE_MAX_CONNECTIONS.
"""
from __future__ import annotations

import os
import re

# name -> why a worker runs without it (one clause, for the run's note)
NOT_PASSED_ON = {
    "CUDA_LAUNCH_BLOCKING": "every launch would wait for the device, so no call could be timed behind the gate",
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "torch cannot share uncached memory with the workers",
    "PYTORCH_CUDA_ALLOC_CONF": "the allocator's settings move a call's buffers, and so its time",
    "PYTORCH_ALLOC_CONF": "the allocator's settings move a call's buffers, and so its time",
    "CUDA_DEVICE_MAX_CONNECTIONS": "one hardware queue hides stream races; --cuda-connections sets it",
    "TORCH_COMPILE_DISABLE": "a compiled baseline would run eager, and every speedup over it would be inflated",
    "TRITON_DEBUG": "Triton kernels would compile with debug checks, and run slower",
    "TRITON_DEFAULT_FP_FUSION": "Triton kernels would round and run differently",
    "TRITON_F32_DEFAULT": "Triton kernels' fp32 dots would change precision",
    "TRITON_KERNEL_OVERRIDE": "Triton would run kernels from an override folder, not the code under test",
}
# torch.compile's tuning: a compiled baseline (block_sparse_attn's FlexAttention) would be tuned
# otherwise than the task builds it, and every speedup over it would move.
_INDUCTOR_TUNING = "torch.compile would tune compiled kernels otherwise than the task's code asks"
NOT_PASSED_ON.update({name: _INDUCTOR_TUNING for name in (
    "TORCHINDUCTOR_MAX_AUTOTUNE", "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM", "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE",
    "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS", "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_SEARCH_SPACE",
    "TORCHINDUCTOR_MAX_AUTOTUNE_FLEX_SEARCH_SPACE", "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING")})

_taken: dict[str, str] = {}   # what take_from_process() removed from this process

# What a worker does inherit and may bear on a kernel's build or time (NVIDIA_TF32_OVERRIDE,
# TRITON_OVERRIDE_ARCH, Inductor's other settings, a profiler's CUDA_INJECTION64_PATH, ...): not
# removed, since most are harmless or wanted, but recorded with the run, so that `kbench compare`
# can say where two saved results ran in different environments.
_RECORDED_PREFIXES = ("CUDA_", "NVIDIA_", "TORCH", "PYTORCH_", "TRITON_", "NCCL_", "OMP_", "LD_PRELOAD")
# kbench sets CUDA_VISIBLE_DEVICES per GPU child itself; caches are where compiled files go.
# Anything named like a credential is never recorded.
_NOT_RECORDED = re.compile(r"^CUDA_VISIBLE_DEVICES$|CACHE|KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH")


def take_from_process() -> None:
    """Remove the variables from this process, before it starts a worker or a GPU child and
    before anything creates a CUDA context or torch's allocator; remember them for the run's
    note (a second call adds to what the first took)."""
    _taken.update({name: os.environ.pop(name) for name in NOT_PASSED_ON if name in os.environ})


def not_passed_on() -> dict[str, str]:
    """The variables this process's workers run without: those taken at start, and any still
    set (kbench used as a library, or a Ray node's own environment)."""
    return {**_taken, **{name: os.environ[name] for name in NOT_PASSED_ON if name in os.environ}}


def passed_on() -> dict[str, str]:
    """The variables of this process that the workers inherit and that may bear on a kernel
    (``_RECORDED_PREFIXES``), for the run's record."""
    return {name: value for name, value in sorted(os.environ.items())
            if name.startswith(_RECORDED_PREFIXES) and name not in NOT_PASSED_ON
            and not _NOT_RECORDED.search(name.upper())}


def differences(a: dict[str, str], b: dict[str, str]) -> str | None:
    """Where two runs' recorded environments differ, for compare's warning (None: they agree)."""
    names = sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))
    if not names:
        return None
    unset = "(unset)"
    return ("the workers' environments differ: " + "; ".join(
        f"{name} {a.get(name, unset)} vs {b.get(name, unset)}" for name in names))


def note(removed: dict[str, str]) -> str | None:
    if not removed:
        return None
    return ("not passed on to the workers: " + "; ".join(
        f"{name}={value} ({NOT_PASSED_ON[name]})" for name, value in sorted(removed.items())))


def strip() -> None:
    """In a worker, first thing (kbench/run/workers.py, its one entry): before Triton (it reads its
    variables once, at import) or the CUDA context (the driver reads the rest when it creates one).
    The fork server the worker comes from imported torch without them."""
    for name in NOT_PASSED_ON:
        os.environ.pop(name, None)


def prepare_worker(interpret: bool, cuda_connections: int | None) -> None:
    """In a loop, on its assignment (after ``strip``), before Triton or CUDA start: what this
    job asks for."""
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    if cuda_connections is not None:
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = str(cuda_connections)
