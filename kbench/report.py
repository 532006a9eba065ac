"""Human-readable reports of run records: a table per case and a summary."""
from __future__ import annotations

from tabulate import tabulate


def _ms(x):
    return "-" if x is None else f"{x * 1e3:.2f}"  # shown in microseconds


def _err(x):
    return "-" if x is None else f"{x:.2g}"


def case_rows(run: dict) -> list[list]:
    rows = []
    for r in run["cases"]:
        spread = "-"
        if r["latency_q1_ms"] is not None:
            spread = f"±{(r['latency_q3_ms'] - r['latency_q1_ms']) * 1e3 / 2:.2f}"
        rows.append([
            r["case"], r["status"] + ("*" if r["flags"] else ""),
            _err(r["max_abs_err"]), _err(r["max_rel_err"]),
            _ms(r["latency_ms"]), spread, _ms(r["baseline_latency_ms"]),
            "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
            "-" if r.get("gbps") is None else f"{r['gbps']:.0f}",
            "-" if r.get("pct_of_copy_bw") is None else f"{r['pct_of_copy_bw']:.0f}%",
        ])
    return rows


HEADERS = ["case", "status", "abs err", "rel err", "time us", "iqr/2 us", "base us",
           "speedup", "GB/s", "% copy bw"]


def text_report(run: dict) -> str:
    out = [tabulate(case_rows(run), HEADERS, tablefmt="simple", disable_numparse=True)]
    for r in run["cases"]:
        if r["reason"]:
            out.append(f"{r['case']}: {r['status']}: {r['reason']}")
        for flag in r["flags"]:
            out.append(f"{r['case']}: flagged: {flag}")
        if r.get("baseline_problem"):
            out.append(f"{r['case']}: note: {r['baseline_problem']}")
    out.extend(f"note: {n}" for n in run["notes"])
    out.append(summary_line(run))
    return "\n".join(out)


def summary_line(run: dict) -> str:
    s = run["summary"]
    parts = [f"{run['task']}/{run['suite']}: passed {s['passed']}/{s['total']}"]
    if s["geomean_speedup"] is not None:
        parts.append(f"geomean speedup {s['geomean_speedup']:.3f}x vs {run['baseline']}")
    elif s["passed"] < s["total"]:
        parts.append("geomean speedup n/a (failed cases)")
    else:
        parts.append("geomean speedup n/a (no baseline)")
    native = s.get("native")
    if native:
        parts.append("native " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in native.items()))
    if s["flagged"]:
        parts.append(f"{s['flagged']} flagged")
    if s.get("fatal"):
        parts.append(f"RUN FAILED: {s['fatal']}")
    if run["timing"]["mode"] == "cuda-graph-replay":
        parts.append("CUDA-graph timing: replays of each captured call, host overhead excluded")
    if not run["timing"]["meaningful"]:
        parts.append("CPU mode: correctness only, timings are not meaningful")
    return "; ".join(parts)


def markdown_report(run: dict) -> str:
    table = tabulate(case_rows(run), HEADERS, tablefmt="github", disable_numparse=True)
    dev = run["device"]
    return (f"### kbench: {run['task']} / {run['suite']}\n\n"
            f"{summary_line(run)}\n\n{table}\n\n"
            f"Device: {dev.get('name', dev.get('device'))}; timing: {run['timing']['mode']}; "
            f"kbench {run['kbench_version']}\n")


def compare_report(result: dict, markdown: bool = False) -> str:
    rows = []
    for r in result["rows"]:
        ci = "-" if r["ratio_ci95"] is None else f"{r['ratio_ci95'][0]:.3f}-{r['ratio_ci95'][1]:.3f}"
        rows.append([r["case"], _ms(r["a_ms"]), _ms(r["b_ms"]),
                     "-" if r["ratio"] is None else f"{r['ratio']:.3f}", ci, r["verdict"],
                     r["a_status"], r["b_status"]])
    headers = ["case", "A us", "B us", "B/A", "95% CI", "verdict", "A", "B"]
    table = tabulate(rows, headers, tablefmt="github" if markdown else "simple", disable_numparse=True)
    s = result["summary"]
    how = "interleaved in one run" if s.get("interleaved") else "from saved results"
    if s.get("normalized_by"):
        how += f"; B/A taken against the {s['normalized_by']} baseline timed beside each, which cancels drift between runs"
    if s["geomean_ratio"] is not None:
        lo, hi = s["geomean_ratio_ci95"]
        line = (f"B/A geomean time {s['geomean_ratio']:.3f} (95% CI {lo:.3f}-{hi:.3f}): {s['verdict']}; "
                f"{s['compared']}/{s['cases']} cases compared ({how})")
    else:
        line = f"no case passed on both sides ({how})"
    if s["failed"]:
        line += f"; {s['failed']} case(s) failed on a side"
    lines = [f"### kbench compare: {result['a']} (A) vs {result['b']} (B)\n" if markdown else "", table, line]
    lines += [f"warning: {w}" for w in result.get("warnings", [])]
    return "\n".join(x for x in lines if x != "")
