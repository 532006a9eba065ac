"""Is B faster than A? Per-case verdicts from both medians' uncertainty, not a bare ratio.

Each median's interval already holds the spread between worker processes, as the run's own
processes showed it (kbench/stats/estimates.py ``pool``, kbench/run/records.py); a geomean also
carries the part of that spread shared by every case of a process. The intervals hold together:
over the compared cases and the geomean at 95% (Bonferroni), with Student's t at the degrees of
freedom the runs read their spreads with, so twenty cases of identical code are called no more
often than one.

Timings are compared only when both sides' are meaningful (CUDA): CPU-mode figures are
interpreter wall clock, so there compare judges the statuses alone. The gate
(``regressed``) controls the family-wise error over the geomean and every case (Holm).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from kbench.errors import KbenchError
from kbench.stats import estimates
from kbench.stats.estimates import PROCESS_REL, max_sm_clock, t_quantile, t_upper_tail, welch_df
from kbench.stats.spread import case_spread, offset_cells
from kbench.worker import environment

Z95 = 1.96
SAME_WITHIN = 0.02   # an interval inside +-2% of 1.0 is "the same" for practical purposes


def shared_noise(processes_a: int, processes_b: int, offset_a: float = PROCESS_REL,
                 offset_b: float = PROCESS_REL) -> float:
    """The relative standard error every case of a geomean shares: a worker process's offset
    moves all its cases together (on the H100 a whole qknorm run sat ~1% above another), so
    it does not shrink with the number of cases; each side's K processes divide its variance
    by K. ``offset_*``: each side's per-process spread (SD, relative; ``process_offset``)."""
    return math.sqrt(offset_a ** 2 / max(1, processes_a) + offset_b ** 2 / max(1, processes_b))


def process_offset(run: dict, side: str = "case") -> tuple[float, float | None]:
    """One side's per-process spread (SD, relative) and its degrees of freedom, as the run's own
    processes showed it: a process's median about its case's figure, pooled over the run's cases
    (``spread.case_spread``, as ``timing.process_spread_pct``). It holds a process's lasting
    offset, which a geomean carries whole, with its offset on one case and its sampling error, so
    it bounds the lasting part from above with many degrees of freedom where an offset fit would
    have one or two. A run of one process a case cannot show it: then ``PROCESS_REL``, taken as
    known (df None)."""
    pooled = case_spread(offset_cells(run.get("cases", []), side))
    if pooled is None:
        return PROCESS_REL, None
    return math.sqrt(pooled.variance), pooled.df


def _show_offsets(summary: dict, offsets: tuple) -> None:
    """A's and B's per-process spreads (%) in the summary."""
    summary["process_offset_pct"] = [round(100 * o, 2) for o, _ in offsets]


def load_result(source) -> dict:
    """One run's record: a dict, or a saved ``kbench eval --json`` file; ``FILE.json:NAME`` picks
    the run of submission NAME (its path or folder name) from a file of several."""
    name = None
    if isinstance(source, dict):
        data, where = source, "the result"
    else:
        text = str(source)
        if ".json:" in text:
            text, name = text.rsplit(":", 1)
        where = text
        try:
            data = json.loads(Path(text).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KbenchError(f"{text}: not a kbench JSON result ({exc})") from None
        except RecursionError:
            raise KbenchError(f"{text}: not a kbench JSON result (nested too deep to read)") from None
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        runs = [r for r in data["runs"] if isinstance(r, dict)]
        names = [str(r.get("submission", "?")) for r in runs]
        picked = [r for r, n in zip(runs, names) if name is not None and name in (n, Path(n).name)]
        if len(picked) != 1:
            listed = ", ".join(Path(n).name for n in names) or "none"
            what = f"no run {name!r}" if name is not None and not picked else f"{len(runs)} runs"
            raise KbenchError(f"{where}: {what} (submissions: {listed}); pick one as {where}:NAME")
        data = picked[0]
    elif name is not None:
        raise KbenchError(f"{where}: holds one run, not several; drop :{name}")
    if not (isinstance(data, dict) and isinstance(data.get("task"), str) and isinstance(data.get("cases"), list)
            and all(isinstance(c, dict) and isinstance(c.get("case"), str) and isinstance(c.get("status"), str)
                    and isinstance(c.get("params"), dict) for c in data["cases"])):
        raise KbenchError(f"{where}: not a kbench JSON result (no 'task' and list of case records with "
                          f"'case', 'status' and 'params')")
    if data.get("timing", {}).get("meaningful") and "processes" not in data["timing"]:
        raise KbenchError(f"{where}: saved by an older kbench whose intervals leave out the spread "
                          f"between processes; run it again to compare")
    return data


def ratio_interval(a_ms: float, a_noise: float, b_ms: float, b_noise: float,
                   z: float = Z95) -> tuple[float, float, float]:
    """B/A with an interval of ``z`` standard errors (95% alone: 1.96), from each median's relative
    standard error (log scale)."""
    r = b_ms / a_ms
    se = math.sqrt((a_noise or 0.0) ** 2 + (b_noise or 0.0) ** 2)
    return r, r * math.exp(-z * se), r * math.exp(z * se)


def together(intervals: int, df: float | None) -> float:
    """The quantile that makes ``intervals`` two-sided intervals hold together at 95% (Bonferroni),
    at Student's t with ``df`` degrees of freedom (None: the normal)."""
    return t_quantile(1 - 0.025 / max(1, intervals), df)


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
    """(status, latency_ms, noise, reason, noise's degrees of freedom) of one side of a case
    record; ``prefix`` "baseline" reads the baseline's fields, "case" the submission's."""
    if prefix == "baseline":
        # None: the runner stops a case at the submission's first failure, before the baseline
        status = case.get("baseline_status") or "not run"
        ms = case.get("baseline_latency_ms") if status == "passed" else None
        return (status, ms, case.get("baseline_noise"), case.get("baseline_reason") or "",
                case.get("baseline_noise_df"))
    return case["status"], case.get("latency_ms"), case.get("noise"), case.get("reason") or "", case.get("noise_df")


def compare_cases(pairs: list[tuple[str, tuple, tuple]], controls: dict | None = None,
                  shared: float = 0.0, timed: bool = True, dfs: tuple = (None, None),
                  shared_df: float | None = None) -> dict:
    """``pairs``: (case, (status, ms, noise[, reason[, noise's df]]) of A, same of B) -> rows and a
    geomean summary.

    ``controls``: per case, ((ms, noise) of A's baseline, same of B's) when both runs timed the
    same baseline beside the submission: the ratio is then taken against it, which cancels
    drift between the runs. ``shared``: the geomean's relative standard error shared by every
    case (``shared_noise``), read with ``shared_df`` degrees of freedom. ``dfs``: the degrees of
    freedom of A's and B's noise where a side does not give its own (None: taken as known).
    ``timed`` False (CPU-mode timings): statuses only, no ratio. Every interval is one of a family
    that holds together at 95%: the compared cases and, with two or more, the geomean."""
    compared = sum(sa[0] == "passed" and sb[0] == "passed" and bool(sa[1]) and bool(sb[1]) and timed
                   for _, sa, sb in pairs)
    family = compared + (compared > 1)
    rows, logs, parts = [], [], []
    for name, side_a, side_b in pairs:
        (sa, ma, na), (sb, mb, nb) = side_a[:3], side_b[:3]
        row = {"case": name, "a_status": sa, "b_status": sb, "a_ms": ma, "b_ms": mb,
               "a_reason": side_a[3] if len(side_a) > 3 else "", "b_reason": side_b[3] if len(side_b) > 3 else "",
               "ratio": None, "ratio_ci95": None, "log_se": None,
               "verdict": "FAILED" if sa != "passed" or sb != "passed" else "NOT TIMED"}
        if sa == "passed" and sb == "passed" and ma and mb and timed:
            ea, eb = na or 0.0, nb or 0.0
            control = (controls or {}).get(name)
            if control:
                (ca, nca), (cb, ncb) = control
                drift = cb / ca
                ea, eb, mb = math.hypot(ea, nca or 0.0), math.hypot(eb, ncb or 0.0), mb / drift
                row["baseline_drift"] = round(drift, 4)
            dfa, dfb = (side[4] if len(side) > 4 and side[4] else run_df
                        for side, run_df in zip((side_a, side_b), dfs))
            df = welch_df([(ea * ea, dfa), (eb * eb, dfb)])
            r, lo, hi = ratio_interval(ma, ea, mb, eb, together(family, df))
            se = math.hypot(ea, eb)
            row.update(ratio=round(r, 4), ratio_ci95=[round(lo, 4), round(hi, 4)], log_se=round(se, 6),
                       df=round(df, 1) if math.isfinite(df) else None, verdict=verdict(lo, hi))
            logs.append(math.log(r))
            parts.append((se * se, df))
        rows.append(row)
    summary = {"cases": len(rows), "compared": len(logs), "timed": timed, "intervals_together": family,
               "failed": sum(r["verdict"] == "FAILED" for r in rows),
               "a_passed": sum(r["a_status"] == "passed" for r in rows),
               "b_passed": sum(r["b_status"] == "passed" for r in rows),
               "geomean_ratio": None, "geomean_ratio_ci95": None, "geomean_log_se": None, "geomean_df": None,
               "verdict": None}
    if logs:
        n = len(logs)
        mean = sum(logs) / n
        terms = [(v / n / n, df) for v, df in parts] + [(shared * shared, shared_df)]
        se = math.sqrt(sum(v for v, _ in terms))
        df = welch_df(terms)
        z = together(family, df)
        lo, hi = math.exp(mean - z * se), math.exp(mean + z * se)
        summary.update(geomean_ratio=round(math.exp(mean), 4), geomean_ratio_ci95=[round(lo, 4), round(hi, 4)],
                       geomean_log_se=round(se, 6), geomean_df=round(df, 1) if math.isfinite(df) else None,
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
    timed = bool(run_a.get("timing", {}).get("meaningful") and run_b.get("timing", {}).get("meaningful"))
    if normalize and timed and len(controls) != len(pairs):
        raise KbenchError("--normalize needs the same baseline timed on every compared case of both results")
    offsets = process_offset(run_a), process_offset(run_b)
    out = compare_cases(pairs, controls if normalize else None,
                        shared_noise(_processes(run_a), _processes(run_b), offsets[0][0], offsets[1][0]), timed,
                        dfs=(offsets[0][1], offsets[1][1]), shared_df=_shared_df(offsets))
    _show_offsets(out["summary"], offsets)
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
    if timed and run_a.get("timing", {}).get("mode") != run_b.get("timing", {}).get("mode"):
        warn.append("different timing modes")
    connections = [run.get("timing", {}).get("cuda_connections") for run in (run_a, run_b)]
    if timed and connections[0] != connections[1]:
        a, b = (c if c is not None else "CUDA's default" for c in connections)
        warn.append(f"different CUDA_DEVICE_MAX_CONNECTIONS in the workers: {a} vs {b} "
                    f"(a multi-stream kernel's overlap differs, and whether a stream race shows)")
    environments = [run.get("timing", {}).get("environment_passed_on") for run in (run_a, run_b)]
    if None not in environments:   # older results did not record it
        differ = environment.differences(*environments)
        if differ:
            warn.append(differ)
    warn += [w for w in (throttled(run_a, "A", "sm_clock_mhz"), throttled(run_b, "B", "sm_clock_mhz")) if w]
    out["warnings"] = warn
    return out


def throttled(run: dict, side: str, key: str) -> str | None:
    """A warning naming the cases where ``side`` (A or B) ran on a throttled card: its SM clock,
    ``key`` of each case, under estimates.THROTTLE_SHARE of the card's maximum."""
    top = max_sm_clock(run.get("device") or {})
    cases = [c["case"] for c in run.get("cases", []) if estimates.is_throttled(c.get(key), top)]
    if not cases:
        return None
    return (f"{side} was timed on a throttled card (SM clock under {estimates.THROTTLE_SHARE:.0%} of its "
            f"maximum) in {len(cases)} case(s): {', '.join(cases[:5])}{', ...' if len(cases) > 5 else ''}; "
            f"those ratios say as much about the card as about the code")


def _shared_df(offsets: tuple) -> float | None:
    """Degrees of freedom of the geomean's shared term, from each side's (spread, df)."""
    df = welch_df([(o * o, d) for o, d in offsets])
    return df if math.isfinite(df) else None


def _processes(run: dict) -> int:
    """How many processes a run's geomean averages over: its pool, or fewer when too few
    cases went round it (each case takes ``processes`` of them)."""
    timing = run.get("timing", {})
    per_case = timing.get("processes", 1)
    pool = timing.get("pool", per_case)
    return max(1, min(pool, per_case * len(run.get("cases", []))))


def compare_interleaved(run: dict) -> dict:
    """One run in which A stood in for the baseline and B was the submission."""
    pairs = [(c["case"], _side(c, "baseline"), _side(c, "case")) for c in run["cases"]]
    k = _processes(run)
    offsets = process_offset(run, "baseline"), process_offset(run, "case")
    out = compare_cases(pairs, shared=shared_noise(k, k, offsets[0][0], offsets[1][0]),
                        timed=bool(run["timing"]["meaningful"]), dfs=(offsets[0][1], offsets[1][1]),
                        shared_df=_shared_df(offsets))
    _show_offsets(out["summary"], offsets)
    out["summary"]["interleaved"] = True
    # A and B both ran without them; the user who exported one is told where it went.
    removal = environment.note(run["timing"].get("environment_not_passed_on") or {})
    out["warnings"] = [w for w in (removal, throttled(run, "A", "baseline_sm_clock_mhz"),
                                   throttled(run, "B", "sm_clock_mhz")) if w]
    return out


# The gate's family-wise error rate, one-sided: the evidence a 95% interval's lower end gives
# for one comparison, here for all of them together.
FAMILY_ALPHA = 0.025


def _p_slower(log_ratio: float, se: float, limit: float, df: float | None = None) -> float:
    """One-sided p-value of "B/A is at most ``limit``" given log(B/A), its standard error and that
    error's degrees of freedom (None: known)."""
    excess = log_ratio - math.log(limit)
    if not se:
        return 0.0 if excess > 0 else 1.0
    return t_upper_tail(excess / se, df)


def slower_than(result: dict, pct: float) -> list[str]:
    """What is slower than A by more than ``pct`` percent with family-wise confidence: Holm's
    step-down over the geomean and every compared case (one-sided, FAMILY_ALPHA in all), so
    twenty cases do not raise twenty chances of a false alarm."""
    limit = 1.0 + pct / 100.0
    s = result["summary"]
    tests = []
    if s["geomean_ratio"] is not None:
        tests.append((_p_slower(math.log(s["geomean_ratio"]), s["geomean_log_se"], limit, s.get("geomean_df")),
                      f"geomean {s['geomean_ratio']:.3f}x the time of A (95% CI "
                      f"{s['geomean_ratio_ci95'][0]:.3f}-{s['geomean_ratio_ci95'][1]:.3f})"))
    for r in result["rows"]:
        if r["ratio"] is not None:
            tests.append((_p_slower(math.log(r["ratio"]), r["log_se"], limit, r.get("df")),
                          f"{r['case']}: {r['ratio']:.3f}x the time of A"))
    tests.sort(key=lambda t: t[0])
    found = []
    for i, (p, what) in enumerate(tests):
        if p > FAMILY_ALPHA / (len(tests) - i):
            break
        found.append(f"{what}, p={p:.2g} (Holm, {len(tests)} tests)")
    return found


def regressed(result: dict, pct: float | None) -> list[str]:
    """Why B fails against A: a case B did not pass, and (``pct`` given, timings meaningful)
    what is significantly slower than A by more than ``pct`` percent (``slower_than``)."""
    reasons = [f"{r['case']}: B {r['b_status']}" for r in result["rows"] if r["b_status"] != "passed"]
    if pct is not None and result["summary"].get("timed", True):
        reasons = slower_than(result, pct) + reasons
    return reasons


def _card(run: dict, case: dict) -> dict:
    """The card a case was timed on: its own (``kbench eval --gpus``/``--ray``) or the run's."""
    card = (run.get("devices") or {}).get(case.get("gpu")) or run.get("device") or {}
    return {**card, "node": run.get("host", {}).get("node")}


def different_cards(a: dict, b: dict) -> str | None:
    """A warning when A and B timed a case on different cards (by UUID where both know it, else
    by host and model): their ratio then holds the cards' own difference too."""
    if not (a.get("timing", {}).get("meaningful") and b.get("timing", {}).get("meaningful")):
        return None
    b_cases = {c["case"]: c for c in b.get("cases", [])}
    differ = []
    for ca in a.get("cases", []):
        cb = b_cases.get(ca["case"])
        if cb is None:
            continue
        x, y = _card(a, ca), _card(b, cb)
        same = (x["uuid"] == y["uuid"] if x.get("uuid") and y.get("uuid")
                else (x.get("name"), x["node"]) == (y.get("name"), y["node"]))
        if not same:
            differ.append(ca["case"])
    if not differ:
        return None
    names = ", ".join(differ[:3]) + (", ..." if len(differ) > 3 else "")
    return (f"A and B ran on different cards ({len(differ)} of {len(b_cases)} cases: {names}): "
            f"their ratios include the cards' own difference")
