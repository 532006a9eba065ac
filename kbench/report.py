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
    out = [tabulate(case_rows(run), HEADERS, tablefmt="simple")]
    for r in run["cases"]:
        if r["reason"]:
            out.append(f"{r['case']}: {r['status']}: {r['reason']}")
        for flag in r["flags"]:
            out.append(f"{r['case']}: flagged: {flag}")
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
    if not run["timing"]["meaningful"]:
        parts.append("CPU mode: correctness only, timings are not meaningful")
    return "; ".join(parts)


def markdown_report(run: dict) -> str:
    table = tabulate(case_rows(run), HEADERS, tablefmt="github")
    dev = run["device"]
    return (f"### kbench: {run['task']} / {run['suite']}\n\n"
            f"{summary_line(run)}\n\n{table}\n\n"
            f"Device: {dev.get('name', dev.get('device'))}; timing: {run['timing']['mode']}; "
            f"kbench {run['kbench_version']}\n")
