"""Is B faster than A? Per-case verdicts from both medians' uncertainty, not a bare ratio."""
from __future__ import annotations

import json
import math
from pathlib import Path

from .errors import KbenchError

Z95 = 1.96
SAME_WITHIN = 0.02   # an interval inside +-2% of 1.0 is "the same" for practical purposes
# How far one case's median moves between runs of the same code on the same card, beyond
# what its own samples show (allocation placement, clocks): relative, and absolute for
# kernels of a few microseconds. Measured on the H100 (docs/measurement.md, "Comparing").
REPRO_REL = 0.01
REPRO_ABS_MS = 0.1e-3
# How far a whole run moves against another (all cases together), added to the geomean's
# uncertainty. Taking B/A against the baseline timed beside each run would cancel a drift of
# the card, but the baselines' own medians move more between processes (FlexAttention 3-4%,
# flashinfer's 8 us qknorm 1-2%, measured on the H100) than the card drifted (under 1%):
# that is opt-in (``normalize``).
RUN_DRIFT = 0.01


def effective_noise(ms: float, noise: float | None) -> float:
    """A median's relative standard error for comparing across workers or runs: its own
    sampling error and the protocol's reproducibility floor."""
    floor = max(REPRO_REL, REPRO_ABS_MS / ms) if ms else REPRO_REL
    return math.sqrt((noise or 0.0) ** 2 + floor ** 2)


def load_result(path: Path) -> dict:
    """A saved ``kbench eval --json`` result (a single run)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise KbenchError(f"{path}: not a kbench JSON result ({exc})") from None
    if "runs" in data:
        raise KbenchError(f"{path}: holds several runs; save one submission per file to compare")
    if "cases" not in data or "task" not in data:
        raise KbenchError(f"{path}: not a kbench JSON result (no 'cases')")
    return data


def ratio_interval(a_ms: float, a_noise: float, b_ms: float, b_noise: float) -> tuple[float, float, float]:
    """B/A with a 95% interval, from each median's relative standard error (log scale)."""
    r = b_ms / a_ms
    se = math.sqrt((a_noise or 0.0) ** 2 + (b_noise or 0.0) ** 2)
    return r, r * math.exp(-Z95 * se), r * math.exp(Z95 * se)


def verdict(lo: float, hi: float) -> str:
    """FASTER/SLOWER when the interval excludes 1; SAME when it lies within +-2%; else UNSURE."""
    if hi < 1.0:
        return "FASTER"
    if lo > 1.0:
        return "SLOWER"
    if lo >= 1.0 - SAME_WITHIN and hi <= 1.0 + SAME_WITHIN:
        return "SAME"
    return "UNSURE"


def _side(case: dict, prefix: str) -> tuple:
    """(status, latency_ms, noise) of one side of a case record; ``prefix`` "baseline" reads
    the baseline's, "case" the submission's."""
    if prefix == "baseline":
        if case.get("baseline_latency_ms") is not None:
            status = "passed"
        elif case.get("baseline_problem"):  # "baseline <label> <status>: <reason>"
            status = case["baseline_problem"].split(": ")[0].split()[-1]
        else:
            status = "not run"  # the runner stops a case at the submission's first failure
        return status, case.get("baseline_latency_ms"), case.get("baseline_noise")
    return case["status"], case.get("latency_ms"), case.get("noise")


def compare_cases(pairs: list[tuple[str, tuple, tuple]], controls: dict | None = None,
                  run_drift: float = 0.0) -> dict:
    """``pairs``: (case, (status, ms, noise) of A, same of B) -> rows and a geomean summary.

    ``controls``: per case, ((ms, noise) of A's baseline, same of B's) when both runs timed the
    same baseline beside the submission: the ratio is then taken against it, which cancels
    drift between the runs. ``run_drift``: uncertainty shared by every case (two runs
    compared without a control)."""
    rows, logs, ses = [], [], []
    for name, (sa, ma, na), (sb, mb, nb) in pairs:
        row = {"case": name, "a_status": sa, "b_status": sb, "a_ms": ma, "b_ms": mb,
               "ratio": None, "ratio_ci95": None, "verdict": "FAILED"}
        if sa == "passed" and sb == "passed" and ma and mb:
            ea, eb = effective_noise(ma, na), effective_noise(mb, nb)
            r, lo, hi = ratio_interval(ma, ea, mb, eb)
            control = (controls or {}).get(name)
            if control:
                (ca, nca), (cb, ncb) = control
                drift = cb / ca
                r, lo, hi = ratio_interval(ma, math.hypot(ea, effective_noise(ca, nca)),
                                           mb / drift, math.hypot(eb, effective_noise(cb, ncb)))
                row["baseline_drift"] = round(drift, 4)
            row.update(ratio=round(r, 4), ratio_ci95=[round(lo, 4), round(hi, 4)], verdict=verdict(lo, hi))
            logs.append(math.log(r))
            ses.append((math.log(hi) - math.log(lo)) / (2 * Z95))
        rows.append(row)
    summary = {"cases": len(rows), "compared": len(logs),
               "failed": sum(r["verdict"] == "FAILED" for r in rows),
               "geomean_ratio": None, "geomean_ratio_ci95": None, "verdict": None}
    if logs:
        mean = sum(logs) / len(logs)
        se = math.hypot(math.sqrt(sum(s * s for s in ses)) / len(logs), run_drift)
        lo, hi = math.exp(mean - Z95 * se), math.exp(mean + Z95 * se)
        summary.update(geomean_ratio=round(math.exp(mean), 4), geomean_ratio_ci95=[round(lo, 4), round(hi, 4)],
                       verdict=verdict(lo, hi))
    return {"rows": rows, "summary": summary}


def compare_runs(run_a: dict, run_b: dict, normalize: bool = False) -> dict:
    """Two saved results of the same task and suite, matched by case name. ``normalize``: take
    B/A against the baseline both runs timed beside the submission (every case must have it)."""
    if run_a["task"] != run_b["task"]:
        raise KbenchError(f"cannot compare task {run_a['task']} with task {run_b['task']}")
    b_cases = {c["case"]: c for c in run_b["cases"]}
    pairs, controls = [], {}
    for ca in run_a["cases"]:
        cb = b_cases.get(ca["case"])
        if cb is None:
            continue
        if ca["params"] != cb["params"]:
            raise KbenchError(f"case {ca['case']} has different parameters in the two results")
        pairs.append((ca["case"], _side(ca, "case"), _side(cb, "case")))
        if ca.get("baseline") and ca.get("baseline") == cb.get("baseline") \
                and ca.get("baseline_latency_ms") and cb.get("baseline_latency_ms"):
            controls[ca["case"]] = ((ca["baseline_latency_ms"], ca.get("baseline_noise")),
                                    (cb["baseline_latency_ms"], cb.get("baseline_noise")))
    if not pairs:
        raise KbenchError("the two results share no case")
    if normalize and len(controls) != len(pairs):
        raise KbenchError("--normalize needs the same baseline timed on every compared case of both results")
    out = compare_cases(pairs, controls if normalize else None, 0.0 if normalize else RUN_DRIFT)
    if not normalize:  # shown, not divided out: did the card itself move between the runs?
        for row in out["rows"]:
            if row["case"] in controls and row["ratio"] is not None:
                (ca, _), (cb, _) = controls[row["case"]]
                row["baseline_drift"] = round(cb / ca, 4)
    out["summary"]["interleaved"] = False
    out["summary"]["normalized_by"] = run_a["cases"][0].get("baseline") if normalize else None
    warn = []
    if run_a.get("device", {}).get("name") != run_b.get("device", {}).get("name"):
        warn.append(f"different devices: {run_a['device'].get('name')} vs {run_b['device'].get('name')}")
    if run_a.get("timing", {}).get("mode") != run_b.get("timing", {}).get("mode"):
        warn.append("different timing modes")
    if not (run_a.get("timing", {}).get("meaningful") and run_b.get("timing", {}).get("meaningful")):
        warn.append("CPU-mode timings are not meaningful")
    out["warnings"] = warn
    return out


def compare_interleaved(run: dict) -> dict:
    """One run in which A stood in for the baseline and B was the submission."""
    pairs = [(c["case"], _side(c, "baseline"), _side(c, "case")) for c in run["cases"]]
    out = compare_cases(pairs)
    out["summary"]["interleaved"] = True
    out["warnings"] = [] if run["timing"]["meaningful"] else ["CPU-mode timings are not meaningful"]
    return out


def regressed(result: dict, pct: float) -> list[str]:
    """Why B counts as slower than A by more than ``pct`` percent (significantly), if it does."""
    limit = 1.0 + pct / 100.0
    reasons = []
    s = result["summary"]
    if s["geomean_ratio_ci95"] and s["geomean_ratio_ci95"][0] > limit:
        reasons.append(f"geomean {s['geomean_ratio']:.3f}x the time of A (95% CI from "
                       f"{s['geomean_ratio_ci95'][0]:.3f})")
    for r in result["rows"]:
        if r["ratio_ci95"] and r["ratio_ci95"][0] > limit:
            reasons.append(f"{r['case']}: {r['ratio']:.3f}x the time of A")
        if r["b_status"] != "passed":
            reasons.append(f"{r['case']}: B {r['b_status']}")
    return reasons
