"""JSON-ready records of cases and runs, and the evidence in them that flags or notes a case.

Field names carry their units.
"""
from __future__ import annotations

import math
import platform
from datetime import datetime, timezone

from kbench import __version__
from kbench.protocol import Report
from kbench.stats.estimates import Summary, is_throttled, max_sm_clock, t_quantile
from kbench.stats.spread import case_spread, offset_cells
from kbench.tasks.check import CheckResult, validate_score
from kbench.tasks.interface import TASK
from kbench.worker import environment

STATUSES = ("passed", "mismatch", "invalid", "error", "crash", "timeout", "lost")
# Not the submission's doing: the GPU or node running the case was lost, twice (kbench/scaleout/plan.py).
# Never a kernel failure; the run is incomplete (exit code 3) and says which cases are missing.
INFRA_STATUSES = ("lost",)


def _r(x, digits=6):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(x, digits)


class WorstError:
    """The largest errors over every checked call of a case (the first and each timed one),
    and the call each was seen on."""

    def __init__(self):
        self.abs_err = self.rel_err = None
        self.at = {"max_abs_err": None, "max_rel_err": None}

    def add(self, check: CheckResult, where: str) -> None:
        if check.max_abs_err is not None and (self.abs_err is None or check.max_abs_err > self.abs_err):
            self.abs_err, self.at["max_abs_err"] = check.max_abs_err, where
        if check.max_rel_err is not None and (self.rel_err is None or check.max_rel_err > self.rel_err):
            self.rel_err, self.at["max_rel_err"] = check.max_rel_err, where

    def result(self) -> CheckResult:
        return CheckResult("passed", max_abs_err=self.abs_err, max_rel_err=self.rel_err)


def case_record(case, status: str, reason: str, check: CheckResult | None = None, *,
                latency=None, host=None, baseline=None, baseline_latency=None, flags=(),
                notes=(), baseline_failure=None, baseline_status=None, error_at=None) -> dict:
    """A case's outcome. Invariant: a passed case has a latency; any other status has none.

    ``baseline_status``: "passed", or the baseline's Failure or CheckResult when it did not
    pass; None when no baseline ran on the case. ``error_at``: where each worst error was seen."""
    assert status in STATUSES, status
    base_status = getattr(baseline_status, "status", baseline_status)
    rec = {
        "case": case.name, "params": dict(case.params), "status": status, "reason": reason,
        "max_abs_err": _r(check.max_abs_err) if check else None,
        "max_rel_err": _r(check.max_rel_err) if check else None,
        "max_abs_err_at": (error_at or {}).get("max_abs_err"),
        "max_rel_err_at": (error_at or {}).get("max_rel_err"),
        "latency_ms": None, "latency_q1_ms": None, "latency_q3_ms": None,
        "latency_ci95_ms": None, "noise": None, "samples": 0, "host_ms": None,
        "baseline": baseline, "baseline_latency_ms": None, "baseline_ci95_ms": None,
        "baseline_samples": 0, "baseline_noise": None, "speedup": None, "flags": list(flags), "notes": list(notes),
        "baseline_problem": baseline_failure,
        # the baseline's outcome as fields (kbench compare reads these, never the prose above)
        "baseline_status": base_status,
        "baseline_reason": getattr(baseline_status, "reason", "") or "",
    }
    if status == "passed" and latency is not None:
        rec.update(latency_ms=_r(latency.median), latency_q1_ms=_r(latency.q1),
                   latency_q3_ms=_r(latency.q3), latency_ci95_ms=[_r(latency.ci_low), _r(latency.ci_high)],
                   noise=_r(latency.noise, 5), samples=latency.n,
                   host_ms=_r(host.median) if host else None)
        if baseline_latency is not None:
            rec.update(baseline_latency_ms=_r(baseline_latency.median),
                       baseline_ci95_ms=[_r(baseline_latency.ci_low), _r(baseline_latency.ci_high)],
                       baseline_samples=baseline_latency.n, baseline_noise=_r(baseline_latency.noise, 5),
                       speedup=_r(baseline_latency.median / latency.median, 4))
    return rec


def geomean(xs) -> float | None:
    xs = list(xs)
    if not xs or any(x is None or x <= 0 for x in xs):
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def add_roofline(rec: dict, roof: dict, calibration: dict) -> None:
    """Achieved bandwidth and flop rate, and the fraction of the card's measured limits."""
    nbytes, flops = roof.get("bytes", 0), roof.get("flops", 0)
    rec["bytes"], rec["flops"] = nbytes, flops
    gbps, tflops = calibration.get("copy_gbps"), calibration.get("matmul_bf16_tflops")
    floor_ms = max(nbytes / (gbps * 1e9) if gbps else 0.0,
                   flops / (tflops * 1e12) if tflops and flops else 0.0) * 1e3
    rec["roofline_ms"] = _r(floor_ms) if floor_ms else None
    lat = rec["latency_ms"] if calibration.get("device") == "cuda" else None
    rec["gbps"] = _r(nbytes / (lat * 1e-3) / 1e9, 2) if lat else None
    rec["tflops"] = _r(flops / (lat * 1e-3) / 1e12, 2) if lat and flops else None
    rec["pct_of_copy_bw"] = _r(100 * rec["gbps"] / gbps, 1) if lat and gbps else None
    rec["roofline_fraction"] = _r(floor_ms / lat, 4) if lat and floor_ms else None
    flag = below_floor(lat, floor_ms)
    if flag:
        rec["flags"].append(flag)


def summarize_run(records: list[dict]) -> dict:
    passed = sum(r["status"] == "passed" for r in records)
    speedups = [r["speedup"] for r in records]
    all_ok = passed == len(records) and records
    return {
        "passed": passed, "total": len(records),
        "statuses": {s: sum(r["status"] == s for r in records) for s in STATUSES if any(r["status"] == s for r in records)},
        # Over every case or not at all: a geomean of the passing cases would hide failures.
        "geomean_speedup": _r(geomean(speedups), 4) if all_ok else None,
        "flagged": sum(bool(r["flags"]) for r in records),
        # cases with no verdict (infrastructure lost them): not the submission's failures
        "lost": sum(r["status"] in INFRA_STATUSES for r in records),
    }


_SIDES = {"case": ("latency_ms", "noise", "latency_ci95_ms", "process_ids"),
          "baseline": ("baseline_latency_ms", "baseline_noise", "baseline_ci95_ms", "baseline_process_ids")}


_DF_KEYS = {"case": "noise_df", "baseline": "baseline_noise_df"}


def widen_by_process_spread(records: list[dict]) -> dict:
    """Give every timed case at least the interval a typical case's processes show.

    A case's own K processes (two by default) read the spread between processes with K - 1
    degrees of freedom: two that happen to sit together give a tight interval that the next
    run's two need not share (qknorm's cases: 1-3% per process on the H100). The run's cases
    together read it far better (``spread.case_spread``, pooled); a case's relative standard
    error is raised to that spread / sqrt(K) where it was below, and its 95% interval (Student's t)
    with it. Each case records the degrees of freedom of its error (``noise_df``): the pool's, or
    K - 1 for a case whose processes split far wider than the others (it keeps its own), none
    where its processes' own sampling error is the larger part (many calls: taken as known).
    Returns each side's spread (SD, %) and degrees of freedom for the run record; None where no
    case had two processes."""
    spread, dfs = {}, {}
    for side, (ms_key, noise_key, ci_key, ids_key) in _SIDES.items():
        pooled = case_spread(offset_cells(records, side))
        spread[side] = _r(100 * math.sqrt(pooled.variance), 3) if pooled is not None else None
        dfs[side] = pooled.df if pooled is not None else None
        if pooled is None:
            continue
        for i, rec in enumerate(records):
            ms, k = rec.get(ms_key), len(rec.get(ids_key) or [])
            if not ms or not k or rec.get(noise_key) is None:
                continue
            own = pooled.own.get(i, 0.0)
            if i in pooled.apart:
                df = k - 1
            elif rec[noise_key] ** 2 > 1.01 * max(own, pooled.variance) / k:
                df = None   # the processes' own sampling error sets it: hundreds of calls, not K processes
            else:
                rec[noise_key] = _r(max(rec[noise_key], math.sqrt(pooled.variance / k)), 5)
                df = pooled.df
            rec[_DF_KEYS[side]] = df
            if df is not None:   # else the 95% interval the case has, at the normal's 1.96, stands
                half = t_quantile(0.975, df) * rec[noise_key] * ms
                rec[ci_key] = [_r(ms - half), _r(ms + half)]
    return {"pct": spread, "df": dfs}


def note_throttling(rec: dict, calibration: dict) -> None:
    """A note on a case whose submission or baseline ran on a throttled card."""
    top = max_sm_clock(calibration)
    targets = (("the submission", "sm_clock_mhz"), (f"baseline {rec.get('baseline')}", "baseline_sm_clock_mhz"))
    for label, key in targets:
        note = throttled(label, rec.get(key), top)
        if note and note not in rec.setdefault("notes", []):
            rec["notes"].append(note)


def run_record(task, suite, options, submission: str, calibration: dict, records: list[dict],
               notes: list[str], fatal: str | None, wall: dict | None = None, calibration_of=None) -> dict:
    """``wall``: where this run's time went (seconds: the whole run, each target's load and
    setup), for a user asking why a run is slow; each case carries its own ``wall_s``.
    ``calibration_of(record)``: the card each case ran on, where they differ (kbench/scaleout/plan.py)."""
    # the card's ceilings as kept for it (kbench/run/card.py); what this run read against them, said
    notes = [*notes, *(n for n in calibration.get("notes", []) if n not in notes)]
    calibration = {k: v for k, v in calibration.items() if k != "notes"}
    roofline = TASK.get(task.module, "roofline")
    for rec in records:
        card = calibration_of(rec) if calibration_of else calibration
        if roofline is not None:
            add_roofline(rec, roofline(rec["params"]), card)
        note_throttling(rec, card)
    spread = widen_by_process_spread(records)
    bound = host_bound(records) if options.device == "cuda" and not options.cuda_graph else None
    if bound is not None:
        notes = [*notes, bound]
    summary = summarize_run(records)
    summary["fatal"] = fatal
    removed = environment.not_passed_on()
    removal = environment.note(removed)
    if removal is not None and removal not in notes:
        notes = [*notes, removal]
    native_score = TASK.get(task.module, "native_score")
    summary["native"] = (validate_score(native_score(records, suite.name), task.name)
                         if native_score is not None and options.device == "cuda" else None)
    return {
        "kbench_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "task": task.name, "suite": suite.name, "submission": submission,
        "device": calibration, "host": {"python": platform.python_version(), "node": platform.node()},
        "timing": {
            "mode": ("cuda-graph-replay" if options.cuda_graph else "cuda-events")
                    if options.device == "cuda" else "cpu-wall-clock",
            "meaningful": options.device == "cuda",
            "l2_flush": options.device == "cuda",
            "noise_target": options.stop.noise, "min_samples": options.stop.min_samples,
            "max_samples": options.stop.max_samples, "budget_s_per_case": options.stop.budget_s,
            "root_seed": options.seed,
            # worker processes per target that time each case (its figure: the mean of their
            # medians), taken in turn from a pool of this many
            "processes": options.process_count,
            "pool": options.pool_size,
            # one process's median about its case's figure, pooled over the cases (SD, %), and
            # its degrees of freedom: every case's interval holds at least this / sqrt(processes)
            # (widen_by_process_spread); compare takes its quantiles at these degrees of freedom
            "process_spread_pct": spread["pct"],
            "process_spread_df": spread["df"],
            # --cuda-connections: CUDA_DEVICE_MAX_CONNECTIONS in the workers (None: CUDA's default,
            # 8; the workers drop any value the environment has, kbench/worker/environment.py)
            "cuda_connections": options.cuda_connections if options.device == "cuda" else None,
            # the shell's variables the workers ran without (kbench/worker/environment.py)
            "environment_not_passed_on": removed,
            # what they did inherit that may bear on a kernel: compare warns where two runs differ
            "environment_passed_on": environment.passed_on(),
        },
        "baseline": next((r["baseline"] for r in records if r["baseline"]), None),
        "wall": wall or {},
        "notes": notes, "cases": records, "summary": summary,
    }


# -- detectors -----------------------------------------------------------------------------
# Parent-side detectors: evidence in a case's samples and the worker's reports that the
# figure cannot be trusted. The counterpart of tripwires.py, which runs in the worker.
#
# Each flag fails the run, so each rests on evidence an honest kernel cannot produce
# (tests/run/test_detectors.py and the honest corpus on the GPU show that it does not).

# A device-wide synchronize that still waits once the timed stream's end event completed, by
# more than an empty call's plus max(0.1 ms, half the call), means work ran on a stream the
# caller never joined (kbench/worker/timer.py, the drain). Unjoined work shorter than this goes
# unflagged. The slack dates from the settle event's device clock, where honest calls showed
# 49-65 us past their end event on the H100 host and a 30 us slack flagged them.
HIDDEN_WORK_SHARE = 0.5
HIDDEN_WORK_SLACK_MS = 0.1
# A measured time this far under the case's physical floor (bytes / copy bandwidth, flops /
# matmul rate) is a bug or a cheat.
FLOOR_MARGIN = 0.9


def tripwire_flags(report: Report) -> list[str]:
    """What the worker's audit hook and identity watch saw."""
    flags = [f"submission {event}" for event in report.events]
    if report.tampered:
        flags.append(f"submission replaced {', '.join(report.tampered)}: timer or harness tampering")
    return flags


def hidden_work(device: Summary, drain: Summary, settle: Summary, floor_ms: float = 0.0) -> str | None:
    """Work on a stream the call never joined back: once the call's end event completed, a
    device-wide synchronize still waited (``drain``, host ms) longer than an empty call's
    (``floor_ms``, measured by the worker) by max(0.1 ms, half the call)."""
    excess = drain.median - floor_ms
    if excess > max(HIDDEN_WORK_SLACK_MS, HIDDEN_WORK_SHARE * device.median):
        return (f"the device settled after {settle.median:.4g} ms but the timed stream after "
                f"{device.median:.4g} ms (a synchronize still waited {drain.median:.4g} ms once the call "
                f"had ended, {floor_ms:.4g} ms after an empty call): work hidden on another stream; "
                f"latency taken as the former")
    return None


def throttled(label: str, mhz: float | None, max_mhz: float | None) -> str | None:
    """A note, not a flag, on a case whose ``label`` target ran on a throttled card."""
    if is_throttled(mhz, max_mhz):
        return (f"{label}'s calls ran at a {mhz:.0f} MHz SM clock, {100 * mhz / max_mhz:.0f}% of the "
                f"card's {max_mhz:.0f} MHz: the card was throttled (power, heat or other work), and "
                f"this time is not comparable with an unthrottled run")
    return None


def host_bound(records: list[dict]) -> str | None:
    """A note, not a flag, when a passed case's call takes longer to return on the host than it
    runs on the device: called back to back (no CUDA graph, no other work to hide behind), such a
    call goes at the host's pace, and a timer on the host's clock (as GPU MODE's and Paradigm's
    originals use) reads the host, not the kernel. kbench's figure is the device's either way."""
    timed = [r for r in records if r.get("host_ms") and r.get("latency_ms")]
    bound = [r for r in timed if r["host_ms"] > r["latency_ms"]]
    if not bound:
        return None
    worst = max(bound, key=lambda r: r["host_ms"] / r["latency_ms"])
    return (f"host-bound on {len(bound)} of {len(timed)} timed cases: the call takes longer to return "
            f"on the host than to run on the device (worst: {worst['case']}, {worst['host_ms'] * 1e3:.1f} "
            f"us on the host, {worst['latency_ms'] * 1e3:.1f} us on the device; per case: host us, "
            f"--wide). Back to back such calls go at the host's pace, and a host-clock timer reads the "
            f"host's time")


def below_floor(latency_ms: float | None, floor_ms: float | None) -> str | None:
    if latency_ms and floor_ms and latency_ms < FLOOR_MARGIN * floor_ms:
        return (f"faster than physically possible ({latency_ms:.4g} ms < floor {floor_ms:.4g} ms): "
                "a bug or a cheat")
    return None


def host_in_window(held: int, total: int) -> str | None:
    """Not a flag: calls that wait for the device themselves cannot be held behind the gate."""
    if total and held < total:
        return (f"{total - held} of {total} timed calls could not be enqueued ahead of the device "
                f"(the call synchronizes, or its host work outlasts the gate): their time includes "
                f"host time, as it would in real use")
    return None
