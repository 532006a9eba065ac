"""How far one target's worker processes sit apart in a run, read from the run's own records.

Every case record keeps each of its processes' medians (``latency_by_process_ms`` with
``process_ids``, the same with ``baseline_``). Their spread about each case's figure, pooled over
the run's cases, is what every case's interval holds at least (kbench/run/records.py) and what
bounds a geomean's shared part (kbench/stats/compare.py); fitted as log median = case level +
process offset, the offsets a process keeps over all its cases are the lasting part
(docs/measurement.md, "Processes").
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from kbench.stats.estimates import t_quantile, welch_df

OFFSET_FIELDS = {"case": ("process_ids", "latency_by_process_ms"),
                 "baseline": ("baseline_process_ids", "baseline_by_process_ms")}


@dataclass(frozen=True)
class OffsetFit:
    offsets: dict          # process -> offset (log scale), mean 0 within its group
    levels: dict           # case index -> level (log scale)
    groups: list           # sets of processes linked by shared cases


def offset_cells(cases: list[dict], side: str = "case") -> list[tuple[int, tuple, float]]:
    """(case index, process, log median) of every timed process of every case. A process is
    (card label, id in its pool): a run spread over GPUs (``--gpus``, ``--ray``) numbers each
    child's pool from 0."""
    ids_field, medians_field = OFFSET_FIELDS[side]
    return [(i, (c.get("gpu"), pid), math.log(median)) for i, c in enumerate(cases)
            for pid, median in zip(c.get(ids_field) or [], c.get(medians_field) or [])
            if median and median > 0]


def fit_offsets(cells: list[tuple[int, object, float]], rounds: int = 500) -> OffsetFit:
    """Case levels and process offsets by alternating least squares. Offsets compare only
    within a group of processes that shared cases, and have mean 0 in each: fixed pairs (a
    pool of 8 two a case as kbench rotated it before 0b0171f: 0-1, 2-3, ...) are four groups,
    where a case's level cannot tell one pair from another."""
    by_case, by_process = defaultdict(list), defaultdict(list)
    for case, pid, y in cells:
        by_case[case].append((pid, y))
        by_process[pid].append((case, y))
    groups, seen = [], set()
    for start in by_process:   # connected parts of the process-case graph
        if start in seen:
            continue
        group, todo = set(), [start]
        while todo:
            pid = todo.pop()
            if pid not in group:
                group.add(pid)
                todo += [q for case, _ in by_process[pid] for q, _ in by_case[case]]
        seen |= group
        groups.append(group)
    offsets = {pid: 0.0 for pid in by_process}
    levels = {}
    for _ in range(rounds):   # plain sums, not statistics.fmean: this loop is most of a compare's time
        levels = {case: sum(y - offsets[pid] for pid, y in obs) / len(obs) for case, obs in by_case.items()}
        fitted = {pid: sum(y - levels[case] for case, y in obs) / len(obs) for pid, obs in by_process.items()}
        for group in groups:
            center = sum(fitted[p] for p in group) / len(group)
            for p in group:
                fitted[p] -= center
        moved = max((abs(fitted[p] - offsets[p]) for p in fitted), default=0.0)
        offsets = fitted
        if moved < 1e-12:
            break
    return OffsetFit(offsets, levels, groups)


def offset_variance(cells: list[tuple[int, object, float]], fitted: OffsetFit | None = None) -> tuple[float, int] | None:
    """The variance of a process's lasting offset (log scale, squared) and its degrees of
    freedom, or None where no two processes shared a case. The offsets' spread within each
    group, less what a process's own case-to-case scatter adds to its fitted offset (the
    residual variance over the cases it took). ``fitted``: ``fit_offsets(cells)``, where the caller
    has it already."""
    if not cells:
        return None
    f = fitted or fit_offsets(cells)
    df = sum(len(g) - 1 for g in f.groups)
    if df == 0:
        return None
    raw = sum(f.offsets[p] ** 2 for g in f.groups for p in g) / df
    residual_df = len(cells) - len(f.levels) - df
    taken = defaultdict(int)
    for _, pid, _ in cells:
        taken[pid] += 1
    if residual_df > 0:
        residual = sum((y - f.levels[c] - f.offsets[p]) ** 2 for c, p, y in cells) / residual_df
        raw -= residual * statistics.fmean(1 / n for n in taken.values())
    return max(0.0, raw), df


@dataclass(frozen=True)
class Spread:
    """How far one process's median sits from its case's figure in a run (log scale)."""

    variance: float          # pooled over the cases that agree with each other
    df: float                # its degrees of freedom (``_effective_df``)
    apart: frozenset         # cases whose processes split far wider: each keeps its own spread
    own: dict                # case -> the variance of its own processes' medians (two or more)


# A case whose processes' variance exceeds the others' by more than an F distribution's 99.99%
# point allows (two processes 16% apart where the others agree within 0.1%) is not pooled with
# them: it keeps its own spread and degrees of freedom, and the others are not widened by it.
APART_P = 0.9999


def case_spread(cells: list[tuple[int, object, float]]) -> Spread | None:
    """The cases' sample variances of their processes' medians, pooled (each case's K processes
    give K - 1 degrees of freedom: one, with two). It holds each process's sampling error, its
    lasting offset and its offset on that case alike, so it also bounds what a lasting offset
    alone moves a geomean (kbench/stats/compare.py). Cases far wider than the pool are set
    ``apart``. None where no case was timed in two or more processes."""
    by_case = defaultdict(list)
    for case, _, y in cells:
        by_case[case].append(y)
    parts = {c: (statistics.variance(ys), len(ys) - 1) for c, ys in by_case.items() if len(ys) >= 2}
    apart: set = set()
    for _ in range(3):   # each case against the pool of the others, so a wide one cannot mask itself
        kept = {c: vk for c, vk in parts.items() if c not in apart}
        total, df = sum(v * k for v, k in kept.values()), sum(k for _, k in kept.values())
        wide = set()
        for c, (v, k) in parts.items():
            rest, rest_df = (total - v * k, df - k) if c in kept else (total, df)
            if rest_df and v > rest / rest_df * _apart_ratio(k, rest_df):
                wide.add(c)
        if wide == apart or len(wide) * 2 > len(parts):
            break
        apart = wide
    kept = [vk for c, vk in parts.items() if c not in apart]
    df = sum(k for _, k in kept)
    if not df:
        return None
    pooled = sum(v * k for v, k in kept) / df
    return Spread(pooled, _effective_df(cells, apart, pooled, df), frozenset(apart),
                  {c: v for c, (v, _) in parts.items()})


def _effective_df(cells, apart, pooled: float, df: int) -> float:
    """The degrees of freedom ``pooled`` really has. A process's lasting offset shows in every
    case it took: with a pool of two, twenty cases read one difference twenty times (one degree
    of freedom), not twenty. Split the spread into the lasting part (``offset_variance``, read
    with the pool's processes less one) and the rest (each case's own), and take the two parts'
    degrees of freedom together (Welch-Satterthwaite)."""
    kept = [cell for cell in cells if cell[0] not in apart]
    lasting = offset_variance(kept)
    if lasting is None or lasting[0] <= 0:
        return df
    part, part_df = min(lasting[0], pooled), lasting[1]
    rest_df = max(1, df - part_df)
    return welch_df([(part, part_df), (pooled - part, rest_df)])


def _apart_ratio(k: int, rest_df: int) -> float:
    """How many times the others' pooled variance a case's own (``k`` degrees of freedom) may be
    before it is set apart: the ``APART_P`` point of an F(k, rest_df), exactly for one degree of
    freedom (the square of a t); for more, a chi-square's over k, where the others read their
    variance with 30 or more degrees of freedom (else never)."""
    if k == 1:
        return t_quantile(1 - (1 - APART_P) / 2, rest_df) ** 2
    if rest_df < 30:
        return math.inf
    z = t_quantile(APART_P, None)   # Wilson-Hilferty
    return max(0.0, 1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3
