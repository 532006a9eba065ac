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


def _beta_pdf(a: float):
    log_norm = math.lgamma(2 * a) - 2 * math.lgamma(a)
    return lambda x: math.exp(log_norm + (a - 1) * (math.log(x) + math.log1p(-x))) if 0 < x < 1 else 0.0


def harrell_davis_median(sorted_xs: list[float]) -> float:
    """The Harrell-Davis estimate of the median: the order statistics weighted by a
    Beta((n+1)/2, (n+1)/2) density over their ranks (Harrell & Davis, Biometrika 1982).

    Why not the middle sample: a kernel whose calls split evenly between two speeds
    (flashinfer's qknorm alternates 7.1 and 8.1 us call by call on the H100) has its middle
    sample in either cluster, a jump of 13% between two runs of the same code; this
    estimate moves smoothly with the share of each. On one-cluster samples it matches the
    middle sample within its interval.
    """
    n = len(sorted_xs)
    if n <= 2:
        return sum(sorted_xs) / n if n else math.nan
    a = (n + 1) / 2
    pdf = _beta_pdf(a)
    # The density lies within ~8 standard deviations of 1/2 (sd = 1 / (2 sqrt(n + 2))):
    # integrate it (Simpson, 8 panels per rank) over the ranks there, then normalize.
    spread = 8 / (2 * math.sqrt(n + 2))
    first, last = max(0, int((0.5 - spread) * n)), min(n, int((0.5 + spread) * n) + 1)
    weights = []
    for i in range(first, last):
        lo, h = i / n, 1 / (8 * n)
        inner = sum((4 if k % 2 else 2) * pdf(lo + k * h) for k in range(1, 8))
        weights.append((pdf(lo) + pdf(lo + 8 * h) + inner) * h / 3)
    total = sum(weights)
    return sum(w * x for w, x in zip(weights, sorted_xs[first:last])) / total


@dataclass(frozen=True)
class Summary:
    """Median (Harrell-Davis estimate) and spread of one case's samples (milliseconds)."""

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
        """Relative standard error of the median, read off its 95% interval (half-width / 1.96)."""
        if self.n < 2 or self.median <= 0:
            return math.inf
        return _noise(self.ci_low, self.ci_high, self.median)


def summarize(samples: list[float]) -> Summary:
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    lo, hi = _interval_ranks(n)
    return Summary(n, harrell_davis_median(xs), quantile(xs, 0.25), quantile(xs, 0.75), xs[lo], xs[hi])


# How far one target's median moves between two worker processes on the same card, beyond
# what either process's samples show: fixed per process (launch gaps, docs/measurement.md "Per-
# process launch gaps"): ~1% (sd) for a one-launch kernel of a few microseconds on the H100, with
# an absolute part for the shortest ones. A figure from K processes carries it divided by K.
PROCESS_REL = 0.01
PROCESS_ABS_MS = 0.1e-3


def process_floor(median_ms: float) -> float:
    """The relative between-process spread (sd) a single process cannot show."""
    return max(PROCESS_REL, PROCESS_ABS_MS / median_ms) if median_ms > 0 else PROCESS_REL


@dataclass(frozen=True)
class Pooled:
    """One target's figure from K worker processes: the mean of the processes' medians, with
    an interval that includes the spread between processes."""

    summary: Summary              # median = mean of the per-process medians; ci and noise: see pool()
    per_process: tuple            # each process's Summary, in process order


def pool(groups: list[list[float]]) -> Pooled:
    """The figure of one target timed in ``len(groups)`` processes (samples per process).

    Median: the mean of the processes' Harrell-Davis medians (a process's fixed offset counts
    1/K whatever its number of samples). Its variance is the larger of
    - what the processes' medians show: their sample variance / K (needs K >= 2), and
    - each process's own sampling error (from its 95% interval) / K^2, plus the spread between
      processes that one process cannot show (``process_floor``)^2 / K,
    so two processes that disagree widen the interval instead of being averaged into a
    precise-looking figure. Quartiles are over all samples."""
    parts = [summarize(g) for g in groups if g]
    every = sorted(x for g in groups for x in g)
    if not parts:
        return Pooled(summarize([]), ())
    k = len(parts)
    mean = sum(p.median for p in parts) / k
    if mean <= 0 or not math.isfinite(mean):
        return Pooled(summarize(every), tuple(parts))
    within = sum(((p.ci_high - p.ci_low) / (2 * 1.96)) ** 2 for p in parts) / k**2
    var = within + (process_floor(mean) * mean) ** 2 / k
    if k >= 2:
        var = max(var, sum((p.median - mean) ** 2 for p in parts) / (k - 1) / k)
    half = 1.96 * math.sqrt(var)
    summary = Summary(len(every), mean, quantile(every, 0.25), quantile(every, 0.75), mean - half, mean + half)
    return Pooled(summary, tuple(parts))


def _interval_ranks(n: int) -> tuple[int, int]:
    """Order statistics bracketing the median with >= 95% coverage (binomial, normal approx.)."""
    half = 1.96 * math.sqrt(n) / 2
    return max(0, math.floor(n / 2 - half) - 1), min(n - 1, math.ceil(n / 2 + half))


def relative_noise(samples: list[float]) -> float:
    """``Summary.noise`` against the middle sample (the stop rule asks it every round; the
    Harrell-Davis estimate costs milliseconds at a thousand samples)."""
    xs = sorted(samples)
    mid = quantile(xs, 0.5)
    if len(xs) < 2 or mid <= 0:
        return math.inf
    lo, hi = _interval_ranks(len(xs))
    return _noise(xs[lo], xs[hi], mid)


def _noise(ci_low: float, ci_high: float, median: float) -> float:
    """The relative standard error the stop rule and compare use: the reported interval's
    half-width / 1.96. Not the IQR formula (1.25 IQR / 1.349 / sqrt(n)): on the H100 a
    few-microsecond kernel's times fall on a few timer ticks, its IQR can be one tick while
    its 10 samples span 5%, and that formula read 0.2% and stopped there (medians of 10
    calls then moved 1-3% between runs)."""
    return (ci_high - ci_low) / (2 * 1.96) / median


@dataclass
class StopRule:
    """When to stop timing one target on one case.

    Stop once the relative standard error of the median is under ``noise`` with at least
    ``min_samples``; or once ``budget_s`` of wall time (everything the case costs: inputs,
    ground truth, checks, both targets) is spent with at least ``min_samples``; or at
    ``max_samples``; or, whatever the count, at four times the budget (a case whose every
    call takes seconds).
    """

    # 1%: the reported 95% interval within about +-2%. A few-microsecond kernel's median still
    # moves ~1% between processes on the H100 (launch gaps fixed per process:
    # docs/measurement.md), so a tighter figure in one process only costs time.
    noise: float = 0.01
    min_samples: int = 10
    max_samples: int = 1000
    budget_s: float = 2.0
    # A target that met its rule keeps being timed beside the others up to this many samples
    # (``verdicts``): a middle of 10 samples jumps between a kernel's speed steps, one of 50
    # does not, and the rounds go on for the others anyway.
    together_up_to: int = 50

    def verdicts(self, series: list[list[float]], elapsed_s: float) -> list[str | None]:
        """Each target's verdict, the targets of one case taken together: a target whose own
        rule is met stops when all of them have, or once it has ``together_up_to`` samples."""
        own = [self.verdict(samples, elapsed_s) for samples in series]
        if all(own):
            return own
        return [why if why and (why == "max samples" or len(samples) >= self.together_up_to) else None
                for why, samples in zip(own, series)]

    def verdict(self, samples: list[float], elapsed_s: float) -> str | None:
        n = len(samples)
        if n >= self.max_samples:
            return "max samples"
        if n < self.min_samples:
            return "budget" if elapsed_s > 4 * self.budget_s else None
        if relative_noise(samples) <= self.noise:
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
