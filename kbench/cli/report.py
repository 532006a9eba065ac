"""Reports for people: tables that fit 100 columns, run and comparison summaries, Markdown, progress.

Tables fit 100 columns unless ``wide`` (kbench/cli/report.py). CPU-mode timings are interpreter
wall clock, not the kernel's speed: no time, speedup or bandwidth figure is printed for them
(the JSON keeps the raw figures, marked ``"meaningful": false``).
"""
from __future__ import annotations

import sys
import textwrap
import time

import click
import tabulate as tabulate_module
from tabulate import tabulate


def _us(x):
    return "-" if x is None else f"{x * 1e3:.2f}"  # milliseconds shown in microseconds


def _err(x):
    return "-" if x is None else f"{x:.2g}"


def _at(where):
    """ "timed call 12 (seed 345)" -> "timed 12"; "first call" -> "first"."""
    if not where:
        return "-"
    words = where.split()
    return "first" if words[0] == "first" else f"timed {words[2]}"


# errors: the worst over every checked call, and the call it was seen on
CPU_HEADERS = ["case", "status", "abs err", "rel err", "worst at"]
# host us: the call's own time on the host (it returns after that; ``host_ms``), beside its device time
GPU_HEADERS = CPU_HEADERS + ["time us", "iqr/2 us", "host us", "base us", "speedup", "GB/s", "% bw"]
# what goes first when a table does not fit: the least telling (a host-bound run says so in a note)
GPU_DROP = ("worst at", "host us", "% bw", "iqr/2 us", "GB/s", "rel err", "base us")


# --wide in CPU mode: "worst at" in full (the timed call's seed), the calls checked, the case's parameters
CPU_WIDE = ["checked", "params"]


def _params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def case_rows(run: dict, wide: bool = False) -> tuple[list[str], list[list]]:
    timed = run["timing"]["meaningful"]
    # with --cuda-graph the host time is the capture's, not a call's
    replayed = run["timing"]["mode"] == "cuda-graph-replay"
    rows = []
    for r in run["cases"]:
        row = [r["case"], r["status"] + ("*" if r["flags"] else ""), _err(r["max_abs_err"]),
               _err(r["max_rel_err"]), _at(r.get("max_abs_err_at"))]
        if timed:
            spread = "-"
            if r["latency_q1_ms"] is not None:
                spread = f"{(r['latency_q3_ms'] - r['latency_q1_ms']) * 1e3 / 2:.2f}"
            host = None if replayed else r.get("host_ms")
            row += [_us(r["latency_ms"]), spread, _us(host), _us(r["baseline_latency_ms"]),
                    "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
                    "-" if r.get("gbps") is None else f"{r['gbps']:.0f}",
                    "-" if r.get("pct_of_copy_bw") is None else f"{r['pct_of_copy_bw']:.0f}%"]
        elif wide:
            checked = (1 + (r.get("samples") or 0)) if r["status"] == "passed" else "-"
            row[4] = r.get("max_abs_err_at") or "-"
            row += [checked, _params(r.get("params", {}))]
        rows.append(row)
    return (GPU_HEADERS if timed else CPU_HEADERS + (CPU_WIDE if wide else [])), rows


def _grouped(items: list[tuple[str, str]], total: int) -> list[str]:
    """(case, text) pairs -> one line per distinct text: a load failure is said once, not per case."""
    cases: dict[str, list[str]] = {}
    for case, text in items:
        cases.setdefault(text, []).append(case)
    out = []
    for text, names in cases.items():
        if len(names) == 1:
            who = names[0]
        elif len(names) == total:
            who = f"all {total} cases"
        else:
            who = f"{len(names)} cases ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
        out.append(f"{who}: {text}")
    return out


def remarks(run: dict) -> list[str]:
    """Below the table: each case's failure reason, flags and notes (a line per distinct text),
    then the run's notes."""
    items = []
    for r in run["cases"]:
        if r["reason"]:
            items.append((r["case"], f"{r['status']}: {r['reason']}"))
        items += [(r["case"], f"flagged: {flag}") for flag in r["flags"]]
        if r.get("baseline_problem"):
            items.append((r["case"], f"note: {r['baseline_problem']}"))
        items += [(r["case"], f"note: {n}") for n in r.get("notes", [])]
    return _grouped(items, len(run["cases"])) + [f"note: {n}" for n in run["notes"]]


def text_report(run: dict, wide: bool = False) -> str:
    headers, rows = case_rows(run, wide)
    table, hidden = render(headers, rows, wide=wide, drop=GPU_DROP)
    out = [table] + ([hidden_note(hidden)] if hidden else [])
    out += [lines(remark, wide) for remark in remarks(run)]   # --wide: each on one line, for grep
    out.append(lines(summary_line(run), wide))
    return "\n".join(out)


def summary_line(run: dict) -> str:
    s = run["summary"]
    parts = [f"{run['task']}/{run['suite']}: passed {s['passed']}/{s['total']}"]
    if not run["timing"]["meaningful"]:
        parts.append("CPU mode (Triton interpreter): correctness only, no timings")
    elif s["geomean_speedup"] is not None:
        parts.append(f"geomean speedup {s['geomean_speedup']:.3f}x vs {run['baseline']}")
    elif s["passed"] < s["total"]:
        parts.append("geomean speedup n/a (" + ("failed" if s["passed"] + s.get("lost", 0) < s["total"]
                                                else "lost") + " cases)")
    else:
        parts.append("geomean speedup n/a (no baseline)")
    native = s.get("native")
    if native:
        parts.append(native_text(native))
    if s.get("lost"):
        parts.append(f"INCOMPLETE: {s['lost']} lost with a GPU or node (no verdict, not the submission's)")
    if s["flagged"]:
        parts.append(f"{s['flagged']} flagged")
    if s.get("fatal"):
        parts.append(f"RUN FAILED: {s['fatal']}")
    if run["timing"]["mode"] == "cuda-graph-replay":
        parts.append("CUDA-graph timing: replays of each captured call, host overhead excluded")
    if run["timing"].get("cuda_connections") is not None:
        parts.append(f"CUDA_DEVICE_MAX_CONNECTIONS={run['timing']['cuda_connections']} in the workers "
                     f"(streams may share a hardware queue: a missing wait between them can go unseen)")
    return "; ".join(parts)


def markdown_report(run: dict) -> str:
    headers, rows = case_rows(run)
    table, _ = render(headers, rows, fmt="github")
    dev = run["device"]
    notes = "".join(f"- {line}\n" for line in remarks(run))
    return (f"### kbench: {run['task']} / {run['suite']}: {run['submission']}\n\n"
            f"{summary_line(run)}\n\n{table}\n\n" + (f"{notes}\n" if notes else "") +
            f"Device: {dev.get('name', dev.get('device'))}; timing: {run['timing']['mode']}; "
            f"kbench {run['kbench_version']}\n")


def compare_rows(result: dict) -> tuple[list[str], list[list]]:
    timed = result["summary"].get("timed", True)
    statuses = not timed or any(r["verdict"] == "FAILED" for r in result["rows"])
    headers = (["case", "A us", "B us", "B/A", "95% CI", "verdict"] if timed else ["case"]) + \
        (["A", "B"] if statuses else [])
    rows = []
    for r in result["rows"]:
        row = [r["case"]]
        if timed:
            ci = "-" if r["ratio_ci95"] is None else f"{r['ratio_ci95'][0]:.3f}-{r['ratio_ci95'][1]:.3f}"
            row += [_us(r["a_ms"]), _us(r["b_ms"]), "-" if r["ratio"] is None else f"{r['ratio']:.3f}",
                    ci, r["verdict"]]
        rows.append(row + ([r["a_status"], r["b_status"]] if statuses else []))
    return headers, rows


def compare_summary(result: dict) -> str:
    s = result["summary"]
    how = "interleaved in one run" if s.get("interleaved") else "from saved results"
    if s.get("normalized_by"):
        how += f"; B/A taken against the {s['normalized_by']} baseline timed beside each, which cancels drift between runs"
    if not s.get("timed", True):
        gate = " (--fail-if-slower too)" if s.get("fail_if_slower") is not None else ""
        line = (f"B passed {s['b_passed']}/{s['cases']}, A {s['a_passed']}/{s['cases']}; CPU mode: "
                f"timings not meaningful, only statuses judged{gate}")
    elif s["geomean_ratio"] is not None:
        lo, hi = s["geomean_ratio_ci95"]
        line = (f"B/A geomean time {s['geomean_ratio']:.3f} (95% CI {lo:.3f}-{hi:.3f}): {s['verdict']}; "
                f"{s['compared']}/{s['cases']} cases compared ({how})")
        if s.get("intervals_together", 0) > 1:
            line += f"; the {s['intervals_together']} intervals hold together at 95%"
        offsets = s.get("process_offset_pct")
        if offsets:
            line += f"; a process's median sits {offsets[0]:g}% (A) and {offsets[1]:g}% (B) from its case's (SD)"
    else:
        line = f"no case passed on both sides ({how})"
    if s["failed"] and s.get("timed", True):
        line += f"; {s['failed']} case(s) failed on a side"
    return line


def compare_report(result: dict, markdown: bool = False, wide: bool = False) -> str:
    headers, rows = compare_rows(result)
    table, hidden = render(headers, rows, wide=wide, fmt="github" if markdown else "simple")
    items = [(r["case"], f"{side} {r[f'{side.lower()}_status']}: {r[f'{side.lower()}_reason']}")
             for r in result["rows"] for side in ("A", "B")
             if r[f"{side.lower()}_status"] not in ("passed", "not run") and r.get(f"{side.lower()}_reason")]
    reasons = _grouped(items, len(result["rows"]))
    warnings = [f"warning: {w}" for w in result.get("warnings", [])]
    if markdown:  # paragraphs apart (a line right under a table renders as one of its rows), and a final newline
        title = f"### kbench compare: {result['a']} (A) vs {result['b']} (B)"
        bullets = "\n".join(f"- {line}" for line in reasons)
        return "\n\n".join(x for x in [title, table, bullets, compare_summary(result), *warnings] if x) + "\n"
    return "\n".join([table, *([hidden_note(hidden)] if hidden else []), *(lines(r, wide) for r in reasons),
                      lines(compare_summary(result), wide), *(lines(w, wide) for w in warnings)])


def native_text(native: dict) -> str:
    """``kbench.tasks.check.score`` as one phrase: name, value and unit, the details, the reason."""
    value = "n/a" if native["value"] is None else f"{native['value']:.4g} {native['unit']}"
    details = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in native["details"].items() if not isinstance(v, (dict, list)))
    reason = f" ({native['reason']})" if native["reason"] else ""
    return f"{native['name']} {value}{reason}" + (f" [{details}]" if details else "")


# -- tables --------------------------------------------------------------------------------
# Tables that fit a 100-column terminal (``--wide`` shows every column as it is).
#
# To fit, in this order: columns that hold nothing ("-" or empty in every row) go; long
# headers wrap at their underscores; free-text columns wrap; then columns go in the order
# the caller gives (least telling first), and the caller says which in one line.

WIDTH = 100
EMPTY = ("-", "")


def _width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _wrap_header(header: str, width: int) -> str:
    """``retrieval_local_bias`` -> lines no wider than ``width`` (or its longest part), cut at "_"."""
    lines, line = [], ""
    for part in header.replace("_", "_\0").split("\0"):
        if line and len(line) + len(part.rstrip("_")) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join(lines + [line])


def render(headers: list[str], rows: list[list], *, wide: bool = False, drop: tuple[str, ...] = (),
           wrap: tuple[str, ...] = (), fmt: str = "simple", width: int = WIDTH,
           numbers: bool = False) -> tuple[str, list[str]]:
    """The table, and the headers of the columns left out to fit ``width`` (not the empty ones).
    ``numbers``: align cells that read as numbers to the right (else every cell is text)."""
    rows = [[str(cell) for cell in row] for row in rows]
    keep = list(range(len(headers)))
    if not wide and rows:
        keep = [i for i in keep if i == 0 or not all(row[i] in EMPTY for row in rows)]

    def table(cols, heads=None, maxw=None):
        heads = heads or {i: headers[i] for i in cols}
        saved, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0  # no room around headers
        try:
            return tabulate([[row[i] for i in cols] for row in rows], [heads[i] for i in cols], tablefmt=fmt,
                            disable_numparse=not numbers, maxcolwidths=maxw and [maxw.get(i) for i in cols])
        finally:
            tabulate_module.MIN_PADDING = saved

    text = table(keep)
    if wide or fmt != "simple" or _width(text) <= width:
        return text, []
    # headers wrapped to their column's widest cell
    cell = {i: max([len(row[i]) for row in rows] + [10]) for i in keep}
    heads = {i: headers[i] if i in wrap else _wrap_header(headers[i], cell[i]) for i in keep}
    hidden: list[str] = []
    order = [i for name in drop for i in keep if headers[i] == name]
    while True:
        maxw = None
        text = table(keep, heads)
        free = [i for i in keep if i in (headers.index(w) for w in wrap if w in headers)]
        if _width(text) > width and free:
            # every other column as it is; the free-text ones share what is left
            others = table([i for i in keep if i not in free], heads) if len(free) < len(keep) else ""
            room = width - _width(others) - 2 * len(free)
            if room >= 10 * len(free):
                maxw = {i: room // len(free) for i in free}
                text = table(keep, heads, maxw)
        if _width(text) <= width or len(keep) == 1:
            return text, hidden
        victim = next((i for i in order if i in keep), keep[-1])
        keep.remove(victim)
        hidden.append(headers[victim])


def lines(text: str, wide: bool = False) -> str:
    """Prose wrapped to the width (as it is with ``wide``)."""
    return text if wide else "\n".join(textwrap.wrap(text, WIDTH, subsequent_indent="  ")) or text


def hidden_note(hidden: list[str]) -> str:
    return (f"(not shown, to fit {WIDTH} columns: {', '.join(hidden)}; --wide shows them)" if hidden else "")


def ranking(runs: list[dict], wide: bool = False) -> str:
    """Submissions ranked by cases passed, then geomean speedup (on CUDA); equal keys share a rank
    (competition ranking: 1, 1, 3), as CPU-mode runs passing alike do."""
    timed = all(r["timing"]["meaningful"] for r in runs)

    def key(r):
        s = r["summary"]
        return (-(s["passed"] == s["total"]), -s["passed"], -((s["geomean_speedup"] or 0) if timed else 0))

    order = sorted(runs, key=key)
    ranks = [1 + next(j for j, other in enumerate(order) if key(other) == key(r)) for r in order]
    rows = [[rank, r["submission"], f"{r['summary']['passed']}/{r['summary']['total']}"
             + (f" ({r['summary']['lost']} lost)" if r["summary"].get("lost") else "")]
            + ([] if not timed else ["-" if r["summary"]["geomean_speedup"] is None
                                     else f"{r['summary']['geomean_speedup']:.3f}x"])
            for rank, r in zip(ranks, order)]
    headers = ["rank", "submission", "passed"] + (["geomean speedup"] if timed else [])
    table, hidden = render(headers, rows, wide=wide)
    return "\n".join([table] + ([hidden_note(hidden)] if hidden else []))


def notice(text: str) -> None:
    click.echo(f"kbench: {text}", err=True)


class Progress:
    """stderr while a run goes: notices first (said once, when the first case starts, so a
    usage error is never preceded by them), then on a terminal a live line per case, on a
    pipe a line at most every ``interval`` seconds (a long CPU run is not silent in CI)."""

    def __init__(self, quiet: bool, interval: float = 10.0, clock=time.monotonic, stream=None):
        self.quiet, self.interval, self.clock = quiet, interval, clock
        self.stream = stream if stream is not None else sys.stderr
        self.notices: list[str] = []
        self.last: float | None = None
        self.live = False

    def __call__(self, text: str) -> None:
        self._say_notices()
        if self.quiet:
            return
        if self.stream.isatty():
            click.echo(f"\r\033[Kkbench: {text}", err=True, nl=False)
            self.live = True
            return
        now = self.clock()
        if self.last is None:
            self.last = now
        elif now - self.last >= self.interval:
            self.last = now
            click.echo(f"kbench: {text}", err=True)

    def _say_notices(self) -> None:
        """The notices so far; -q keeps only the warnings."""
        for line in self.notices:
            if not self.quiet or line.startswith("warning"):
                notice(line)
        self.notices = []

    def done(self) -> None:
        self._say_notices()   # what came after the last progress line (compare's warnings)
        if self.live:
            click.echo("\r\033[K", err=True, nl=False)
            self.live = False
