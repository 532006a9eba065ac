"""The card a run is timed on: what it is, its L2 and flush size, its measured copy and matmul ceilings."""
from __future__ import annotations

import subprocess

import torch


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def flush_bytes(device: str) -> int:
    """At least twice the L2 (sized from the device), and at least do_bench's 256 MB, so the
    host has as long as under the original challenges' timer to enqueue a call."""
    if device != "cuda":
        return 0
    return max(2 * l2_bytes(), 256 * 2**20)


def _event_ms(fn, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def measure_copy_gbps(nbytes: int = 2**30) -> float:
    """Device-to-device copy, counting bytes read plus written; best of 10."""
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_event_ms(lambda: dst.copy_(src), 10))
    return 2 * nbytes / (best * 1e-3) / 1e9


def measure_matmul_tflops(n: int = 8192) -> float:
    """bf16 n x n x n product on random data; median of 10 after warm-up."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = sorted(_event_ms(lambda: a @ b, 10))
    return 2 * n**3 / (times[len(times) // 2] * 1e-3) / 1e12


def _nvidia_smi() -> dict:
    fields = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")] if out.strip() else []
    return dict(zip(fields.split(","), values))


def calibrate(device: str, measure: bool = True) -> dict:
    """What the card is and, with ``measure``, what it can do (copy bandwidth, matmul rate),
    recorded with every result."""
    if device != "cuda":
        import platform

        return {"device": "cpu", "name": platform.processor() or platform.machine(),
                "torch": torch.__version__}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {
        "device": "cuda", "name": props.name, "sm_count": props.multi_processor_count,
        "l2_bytes": l2_bytes(), "memory_bytes": props.total_memory,
        "torch": torch.__version__, "cuda": torch.version.cuda,
    }
    if measure:
        info.update(copy_gbps=round(measure_copy_gbps(), 1), matmul_bf16_tflops=round(measure_matmul_tflops(), 1))
    info.update({k.replace(".", "_"): v for k, v in _nvidia_smi().items()})
    torch.cuda.empty_cache()
    return info
