"""Sample statistics, the stopping rule, and the card's calibration (copy bandwidth, matmul rate)."""
from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass

import torch


def quantile(sorted_xs: list[float], q: float) -> float:
    if not sorted_xs:
        return math.nan
    pos = q * (len(sorted_xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """Median and spread of one case's samples (milliseconds)."""

    n: int
    median: float
    q1: float
    q3: float
    ci_low: float   # distribution-free 95% confidence interval of the median
    ci_high: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def noise(self) -> float:
        """Relative standard error of the median, from the IQR (robust to outliers)."""
        if self.n < 2 or self.median <= 0:
            return math.inf
        sigma = self.iqr / 1.349
        return 1.2533 * sigma / math.sqrt(self.n) / self.median


def summarize(samples: list[float]) -> Summary:
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    # Order statistics bracketing the median with >= 95% coverage (binomial, normal approx.).
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return Summary(n, quantile(xs, 0.5), quantile(xs, 0.25), quantile(xs, 0.75), xs[lo], xs[hi])


@dataclass
class StopRule:
    """When to stop timing one target on one case.

    Stop once the relative standard error of the median is under ``noise`` with at least
    ``min_samples``; or once ``budget_s`` of wall time (everything the case costs: inputs,
    ground truth, checks, both targets) is spent with at least ``min_samples``; or at
    ``max_samples``; or, whatever the count, at four times the budget (a case whose every
    call takes seconds).
    """

    # 1%: a median of a few-microsecond kernel moves 1-4% between processes on the H100
    # (placement, code fetch: docs/measurement.md), so a tighter figure in one process only
    # costs time; at 0.5% flashinfer's qknorm needed ~350 calls per case, the whole budget.
    noise: float = 0.01
    min_samples: int = 10
    max_samples: int = 1000
    budget_s: float = 2.0

    def verdict(self, samples: list[float], elapsed_s: float) -> str | None:
        n = len(samples)
        if n >= self.max_samples:
            return "max samples"
        if n < self.min_samples:
            return "budget" if elapsed_s > 4 * self.budget_s else None
        if summarize(samples).noise <= self.noise:
            return "noise target"
        if elapsed_s >= self.budget_s:
            return "budget"
        return None


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
