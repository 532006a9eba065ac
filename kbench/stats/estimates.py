"""Statistics of timed calls: medians, their intervals, pooled processes and the stop rule."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbench.protocol import Failure


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
    first, last, weights, total = _hd_weights(n)
    return sum(w * x for w, x in zip(weights, sorted_xs[first:last])) / total


@functools.lru_cache(maxsize=256)
def _hd_weights(n: int) -> tuple[int, int, tuple, float]:
    """The Harrell-Davis weights of n samples (a function of n alone): (first rank, last rank,
    the weights of the ranks between, their sum)."""
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
    return first, last, tuple(weights), sum(weights)


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
# what either process's samples show (docs/measurement.md, "Processes"): assumed only where a run
# cannot read it, a figure from one process: ~1% (sd) for a one-launch kernel of a few
# microseconds on the H100, with an absolute part for the shortest ones. A run timed in two or
# more processes reads it from its own processes (``pool``, ``case_spread``).
PROCESS_REL = 0.01
PROCESS_ABS_MS = 0.1e-3


def process_floor(median_ms: float) -> float:
    """The relative between-process spread (sd) assumed for a figure of one process."""
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
    1/K whatever its number of samples). Its variance, with K >= 2, is the larger of what the
    processes' medians show (their sample variance / K) and each process's own sampling error
    (from its 95% interval) / K^2: two processes that disagree widen the interval instead of
    being averaged into a precise-looking figure. The run then gives each case at least what a
    typical case's processes show (kbench/run/records.py ``widen_by_process_spread``), which
    K - 1 degrees of freedom alone read poorly. One process cannot show the spread between
    processes: its figure carries ``process_floor``. Quartiles are over all samples."""
    parts = [summarize(g) for g in groups if g]
    every = sorted(x for g in groups for x in g)
    if not parts:
        return Pooled(summarize([]), ())
    k = len(parts)
    mean = sum(p.median for p in parts) / k
    if mean <= 0 or not math.isfinite(mean):
        return Pooled(summarize(every), tuple(parts))
    var = sum(((p.ci_high - p.ci_low) / (2 * 1.96)) ** 2 for p in parts) / k**2
    if k >= 2:
        var = max(var, sum((p.median - mean) ** 2 for p in parts) / (k - 1) / k)
    else:
        var += (process_floor(mean) * mean) ** 2
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


def max_sm_clock(calibration: dict) -> float | None:
    """The card's maximum SM clock (MHz) from its calibration's nvidia-smi reading ("1980 MHz")."""
    try:
        return float(str(calibration.get("clocks_max_sm", "")).split()[0])
    except (ValueError, IndexError):
        return None


DEFAULT_PROCESSES = 2   # --processes: worker processes per target and case on a GPU (docs/measurement.md)


# A case whose calls ran with the SM clock (read from the gate's spin just before each call)
# under this share of the card's maximum ran on a throttled card: at its power cap, hot, or
# clocked down by someone else's work. Not a flag: the kernel may be honest and the card busy.
# Measured on an H200 (docs/measurement.md): 1980 MHz at rest and under kbench's own calls, down
# to 1350 MHz at the power cap.
THROTTLE_SHARE = 0.9


def is_throttled(mhz: float | None, max_mhz: float | None) -> bool:
    """``mhz``: a case's median SM clock; ``max_mhz``: the card's maximum (either None: unknown)."""
    return bool(mhz and max_mhz and mhz < THROTTLE_SHARE * max_mhz)


@dataclass
class Series:
    """One target's timed calls on one case."""

    device: list[float] = field(default_factory=list)   # event time on the caller's stream
    settle: list[float] = field(default_factory=list)   # start event to all streams idle
    drain: list[float] = field(default_factory=list)    # host wait for other streams once the call's ended
    host: list[float] = field(default_factory=list)     # host time inside the call
    floor: list[float] = field(default_factory=list)    # an empty call's drain
    gate: list[float] = field(default_factory=list)     # the gate each call ran behind
    clock: list[float] = field(default_factory=list)    # SM clock (MHz) in each call's gate, if it had one
    process: list[int] = field(default_factory=list)    # which of the target's processes timed it
    held: int = 0                 # calls fully enqueued before the device reached them
    misses: int = 0               # tries discarded because the gate was too short
    done: str | None = None       # why sampling stopped
    failed: Failure | None = None  # why this target's timing was abandoned (kbench.protocol.Failure)

    def add(self, sample, process: int) -> None:
        self.process.append(process)
        self.device.append(sample.device_ms)
        self.settle.append(sample.settle_ms)
        self.drain.append(sample.drain_ms)
        self.host.append(sample.host_ms)
        self.floor.append(sample.floor_ms)
        self.gate.append(sample.gate_ms)
        if sample.sm_mhz > 0:
            self.clock.append(sample.sm_mhz)
        self.held += sample.held
        self.misses += sample.misses

    @property
    def active(self) -> bool:
        return self.done is None and self.failed is None

    def by_process(self, values: list[float], processes: int, digits: int = 6) -> list[list[float]]:
        return [[round(v, digits) for v, p in zip(values, self.process) if p == k] for k in range(processes)]

    def pooled(self, values: list[float], processes: int) -> Pooled:
        return pool([[v for v, p in zip(values, self.process) if p == k] for k in range(processes)])


def median_clock(mhz: list[float]) -> float | None:
    return round(summarize(mhz).median) if mhz else None


# -- Student's t, for intervals whose variance a run estimated from few processes ---------

def _t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom (df > 0), by Simpson's rule on the
    density from 0 to |x| (x is small here: a few units)."""
    if math.isinf(df):
        return 0.5 * math.erfc(-x / math.sqrt(2))
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    a, n = abs(x), 400
    h = a / n
    f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
    area = h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))
    return 0.5 + math.copysign(area, x)


def t_quantile(p: float, df: float | None) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t; ``df`` None or infinite: the normal's."""
    return _t_quantile(p, round(df, 1) if df is not None and math.isfinite(df) else None)


@functools.lru_cache(maxsize=4096)
def _t_quantile(p: float, df: float | None) -> float:
    df = math.inf if df is None else max(df, 0.1)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        lo, hi = hi, 2 * hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def t_upper_tail(x: float, df: float | None) -> float:
    """P(T > x) for Student's t (``df`` None or infinite: the normal)."""
    return 1.0 - _t_cdf(x, math.inf if df is None else df)


def welch_df(parts: list[tuple[float, float | None]]) -> float:
    """Degrees of freedom of a sum of variance estimates (Welch-Satterthwaite): ``parts`` are
    (variance, its df), df None for a variance taken as known."""
    total = sum(v for v, _ in parts)
    spread = sum(v * v / df for v, df in parts if df and v > 0)
    return total * total / spread if spread > 0 else math.inf
