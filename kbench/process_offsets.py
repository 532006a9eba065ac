"""How far one target's worker processes sit apart in a run, read from the run's own records.

Every case record keeps each of its processes' medians (``latency_by_process_ms`` with
``process_ids``, the same with ``baseline_``). Fitted as log median = case level + process
offset, the offsets a process keeps over all its cases are what a suite's geomean carries
(docs/measurement.md, "Processes"); what a process shows on one case alone averages out.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

FIELDS = {"case": ("process_ids", "latency_by_process_ms"),
          "baseline": ("baseline_process_ids", "baseline_by_process_ms")}


@dataclass(frozen=True)
class Fit:
    offsets: dict          # process -> offset (log scale), mean 0 within its group
    levels: dict           # case index -> level (log scale)
    groups: list           # sets of processes linked by shared cases


def cells(cases: list[dict], side: str = "case") -> list[tuple[int, tuple, float]]:
    """(case index, process, log median) of every timed process of every case. A process is
    (card label, id in its pool): a run spread over GPUs (``--gpus``, ``--ray``) numbers each
    child's pool from 0."""
    ids_field, medians_field = FIELDS[side]
    return [(i, (c.get("gpu"), pid), math.log(median)) for i, c in enumerate(cases)
            for pid, median in zip(c.get(ids_field) or [], c.get(medians_field) or [])
            if median and median > 0]


def fit(cells: list[tuple[int, object, float]], rounds: int = 500) -> Fit:
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
    for _ in range(rounds):
        levels = {case: statistics.fmean(y - offsets[pid] for pid, y in obs) for case, obs in by_case.items()}
        fitted = {pid: statistics.fmean(y - levels[case] for case, y in obs) for pid, obs in by_process.items()}
        for group in groups:
            center = statistics.fmean(fitted[p] for p in group)
            for p in group:
                fitted[p] -= center
        moved = max((abs(fitted[p] - offsets[p]) for p in fitted), default=0.0)
        offsets = fitted
        if moved < 1e-12:
            break
    return Fit(offsets, levels, groups)


def offset_variance(cells: list[tuple[int, object, float]], fitted: Fit | None = None) -> tuple[float, int] | None:
    """The variance of a process's lasting offset (log scale, squared) and its degrees of
    freedom, or None where no two processes shared a case. The offsets' spread within each
    group, less what a process's own case-to-case scatter adds to its fitted offset (the
    residual variance over the cases it took). ``fitted``: ``fit(cells)``, where the caller
    has it already."""
    if not cells:
        return None
    f = fitted or fit(cells)
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


def case_spread(cells: list[tuple[int, object, float]]) -> float | None:
    """The variance (log scale, squared) of one process's median about its case's figure, for
    a typical case: pooled over the run's cases, where a case's own K processes give it K - 1
    degrees of freedom (one, with two). Robust to a few cases whose processes split wide (they
    keep their own spread): the median of the cases' sample variances, divided by the median
    of a chi-square over its degrees of freedom ((1 - 2 / 9k)^3, Wilson-Hilferty). None with
    fewer than three cases timed in two or more processes."""
    by_case = defaultdict(list)
    for case, _, y in cells:
        by_case[case].append(y)
    variances = [(statistics.variance(ys), len(ys) - 1) for ys in by_case.values() if len(ys) >= 2]
    if len(variances) < 3:
        return None
    df = statistics.median_low(k for _, k in variances)
    return statistics.median(v for v, _ in variances) / (1 - 2 / (9 * df)) ** 3
