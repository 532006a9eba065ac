"""Charts of saved results (kbench plot): the roofline, each case's timed calls, B against A."""
from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from kbench import api
from kbench.cli.report import case_rows, compare_rows, compare_summary, render, summary_line
from kbench.errors import KbenchError
from kbench.stats.compare import load_result

SUFFIXES = (".png", ".svg", ".html")
WIDTH_IN = 10.0
VERDICT_COLOURS = {"FASTER": "#1a9641", "SLOWER": "#d7191c", "SAME": "#6a6a6a", "UNSURE": "#e08a00"}
LABEL_GAP = 0.035   # of the roofline's height (log scale): a line of its 7-point labels

# kbench plot's help, and its options' (kbench/cli/commands.py registers the command)
HELP = """Draw saved results: a roofline, each case's timed calls; of two results (A B), B/A per case too.

A result is a kbench eval --json file (FILE.json:NAME picks one run of several). The roofline
puts each case's achieved FLOP/s, submission and baseline, under the card's measured copy and
matmul ceilings; the timed calls are shown per process around the median and its 95%
interval; B/A is kbench compare's, with its verdicts and geomean. -o's suffix picks the form:
.png or .svg (one figure) or .html (one self-contained page: the charts, then the tables).
Needs matplotlib (pip install "kbench[plot]"). Exit code 2 on a usage error.

\b
Example:
    kbench plot runs/1.json -o runs/1.html
    kbench plot runs/best.json runs/12.json -o compare.svg
"""
OUTPUT_HELP = "The file to write: .png, .svg or .html."
PLOT_HELP = "Also draw B/A per case (of two saved results, their charts too) into FILE: .png, .svg or .html."


@dataclass
class Chart:
    gid: str                  # its axes' id in an SVG, its <figure>'s in the page
    height_in: float
    draw: Callable            # (matplotlib Axes) -> None


def check_output(option: str, path: Path | None) -> None:
    """What a chart's file must be, beyond what any written file must (kbench/cli/commands.py
    ``check_outputs``), and matplotlib installed: said before a comparison is run, not after."""
    if path is None:
        return
    if path.suffix not in SUFFIXES:
        raise KbenchError(f"{option} {path}: a chart is written as .png, .svg or .html")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise KbenchError('charts need matplotlib: pip install "kbench[plot]"') from None


def draw(sources, out: Path | None, comparison: dict | None = None) -> None:
    """Charts of one saved result, or of two (A B) with B/A per case, into ``out`` (none: no
    chart asked for). ``comparison``: kbench compare's result, already made; of two folders,
    ``sources`` is empty and it is the only chart."""
    if out is None:
        return
    if len(sources) > 2:
        raise KbenchError(f"{len(sources)} results: plot one, or two to compare (A B)")
    runs = [timed_result(source) for source in sources]
    if len(runs) == 2 and runs[0]["task"] != runs[1]["task"]:
        raise KbenchError(f"{sources[1]} is a {runs[1]['task']} result but {sources[0]} is {runs[0]['task']}: "
                          f"two results are compared within one task")
    if len(runs) == 2 and comparison is None:
        notices: list[str] = []
        comparison = api.compare(str(sources[0]), str(sources[1]), notices=notices)
        for line in notices:
            click.echo(f"kbench: {line}", err=True)
    if comparison is not None and not comparison["summary"].get("timed", True):
        raise KbenchError("the comparison: CPU mode results carry no meaningful timings")
    labels = [f"{side}: {Path(str(source)).name}" for side, source in zip("AB", sources)] if len(runs) == 2 else [""]
    charts = [comparison_chart(comparison)] if comparison is not None else []
    for run, label in zip(runs, labels):
        prefix = label[:1] + "-" if label else ""   # the ids of A's and B's charts apart
        charts += [c for c in (roofline_chart(run, prefix, label), calls_chart(run, prefix, label)) if c]
    if not charts:
        raise KbenchError(f"{sources[0]}: no case has a time: nothing to draw")
    try:
        if not out.parent.exists():   # as --json does: made, and said
            out.parent.mkdir(parents=True)
            click.echo(f"kbench: made the folder {out.parent}", err=True)
        save(out, charts, runs, labels, comparison)
    except OSError as exc:
        raise KbenchError(f"{out}: not written: {exc.strerror or exc}") from None


def timed_result(source) -> dict:
    """A saved result (kbench compare's reading of it) whose timings mean something."""
    run = load_result(str(source))
    if not run["timing"].get("meaningful"):
        raise KbenchError(f"{source}: CPU mode results carry no meaningful timings")
    return run


# -- what each chart shows ------------------------------------------------------------------

def _timed(run: dict) -> list[dict]:
    return [c for c in run["cases"] if c["status"] == "passed" and c.get("latency_ms")]


def _heading(run: dict, label: str, what: str) -> str:
    who = label or run["submission"]
    return f"{who}: {run['task']} / {run['suite']} on {run['device'].get('name', '?')}\n{what}"


def roofline_chart(run: dict, prefix: str = "", label: str = "") -> Chart | None:
    """Each case at its arithmetic intensity against the FLOP/s it achieved, submission and
    baseline, under the card's measured copy and matmul ceilings."""
    cases = [c for c in _timed(run) if c.get("flops") and c.get("bytes")]
    if not cases:
        return None
    device = run["device"]
    bandwidth = (device.get("copy_gbps") or 0) * 1e9            # bytes/s: FLOP/s per FLOP/byte
    peak = (device.get("matmul_bf16_tflops") or 0) * 1e12

    def draw(ax):
        from matplotlib.ticker import NullFormatter

        xs = [c["flops"] / c["bytes"] for c in cases]
        ys = [c["flops"] / (c["latency_ms"] * 1e-3) for c in cases]
        ridge = peak / bandwidth if peak and bandwidth else None
        lo, hi = min(xs) / 12, max(max(xs), ridge or 0) * 4
        if bandwidth:
            end = ridge or hi
            ax.plot([lo, end], [bandwidth * lo, bandwidth * end], color="#3b6fb6", gid=f"{prefix}ceiling-copy",
                    label=f"copy ceiling {device['copy_gbps']:.0f} GB/s x intensity (measured)")
        if peak:
            ax.plot([ridge or lo, hi], [peak, peak], color="#b63b3b", gid=f"{prefix}ceiling-matmul",
                    label=f"bf16 matmul ceiling {device['matmul_bf16_tflops']:.0f} TFLOP/s (measured)")
        ax.scatter(xs, ys, s=30, color="black", zorder=3, gid=f"{prefix}roofline-submission", label="submission")
        base = [(x, c["flops"] / (c["baseline_latency_ms"] * 1e-3)) for x, c in zip(xs, cases)
                if c.get("baseline_latency_ms")]
        if base:
            ax.scatter(*zip(*base), s=30, marker="s", facecolors="none", edgecolors="#555555", zorder=3,
                       gid=f"{prefix}roofline-baseline", label=f"baseline ({run.get('baseline')})")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), xlabel="arithmetic intensity (FLOP per byte moved)",
               ylabel="achieved FLOP/s", title=_heading(run, label, "roofline: what each case achieves against "
                                                                    "the card's measured ceilings"))
        ax.margins(y=0.15)
        bottom, top = (math.log10(v) for v in ax.get_ylim())
        points = sorted(zip(ys, xs, cases), key=lambda p: p[:2])
        for side, group in ((1, points[0::2]), (-1, points[1::2])):   # neighbours' names on opposite sides
            heights = _spread([math.log10(y) for y, _, _ in group], LABEL_GAP * (top - bottom))
            for (y, x, case), height in zip(group, heights):
                ax.annotate(case["case"], (x, y), xytext=(x * 1.3 ** side, 10 ** height), fontsize=7, va="center",
                            ha="left" if side > 0 else "right", gid=f"{prefix}label-{case['case']}",
                            arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.5})
        ax.grid(True, which="major", alpha=0.3)
        for axis in (ax.xaxis, ax.yaxis):   # 2x10^1, 3x10^1... over a short range: they run into each other
            axis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))

    return Chart(f"{prefix}roofline", 5.0, draw)


def _spread(heights: list[float], gap: float) -> list[float]:
    """Labels' heights for points at ``heights`` (ascending): at least ``gap`` apart, none below its point."""
    out: list[float] = []
    for h in heights:
        out.append(max(h, out[-1] + gap) if out else h)
    return out


def _process_calls(case: dict) -> list[tuple[int, list[float]]]:
    """(process id, its timed calls in ms) of a case; each process's median where the result
    kept no per-call samples."""
    calls = case.get("samples_ms") or [[m] for m in case.get("latency_by_process_ms") or [case["latency_ms"]]]
    return list(zip(case.get("process_ids") or range(len(calls)), calls))


def calls_chart(run: dict, prefix: str = "", label: str = "") -> Chart | None:
    """Per case, every timed call of the submission, a row per process, as % from the case's
    median, with the median and its 95% interval marked."""
    cases = _timed(run)
    if not cases:
        return None
    kept = all(c.get("samples_ms") for c in cases)
    rows = max(len(_process_calls(c)) for c in cases)

    def draw(ax):
        seen: dict[int, object] = {}
        for i, case in enumerate(cases):
            median, groups = case["latency_ms"], _process_calls(case)
            for j, (pid, calls) in enumerate(groups):
                y = i + (j - (len(groups) - 1) / 2) * 0.7 / len(groups)
                # spread within the row by the golden ratio's multiples: even, and the same every time
                jitter = [0.25 / len(groups) * ((n * 0.618) % 1 - 0.5) for n in range(len(calls))]
                seen[pid] = ax.scatter([100 * (t / median - 1) for t in calls], [y + d for d in jitter], s=9,
                                       alpha=0.75, color=f"C{pid % 10}", gid=f"{prefix}calls-{case['case']}-{j}")
            lo, hi = case["latency_ci95_ms"]
            ax.plot([100 * (lo / median - 1), 100 * (hi / median - 1)], [i, i], color="#999999", lw=5, alpha=0.6,
                    solid_capstyle="butt", zorder=1, gid=f"{prefix}interval-{case['case']}")
            ax.plot([0], [i], marker="|", markersize=16, mew=2, color="black", zorder=3,
                    gid=f"{prefix}median-{case['case']}")
        ax.set_yticks(range(len(cases)), [f"{c['case']}\n{c['latency_ms'] * 1e3:.2f} us" for c in cases], fontsize=8)
        ax.set_ylim(len(cases) - 0.5, -0.5)
        ax.axvline(0, color="black", lw=0.5)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend([seen[p] for p in sorted(seen)], [f"process {p}" for p in sorted(seen)], fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1))
        what = ("each timed call" if kept else
                "each process's median only: per-call samples were not kept in this result")
        ax.set(xlabel="% from the case's median (grey bar: the median's 95% interval)",
               title=_heading(run, label, f"timed calls per case and process: {what}"))

    return Chart(f"{prefix}calls", 1.3 + len(cases) * (0.25 + 0.07 * rows), draw)


def comparison_chart(result: dict) -> Chart:
    """B/A per case with its 95% interval, coloured by verdict, beside the geomean and 1."""
    rows = result["rows"]

    def draw(ax):
        from matplotlib.lines import Line2D

        for i, row in enumerate(rows):
            name, verdict = row["case"], row["verdict"]
            if row["ratio"] is None:
                ax.annotate(f"{verdict}: A {row['a_status']}, B {row['b_status']}", (1, i), ha="center",
                            va="center", fontsize=8, gid=f"verdict-{verdict}-{name}")
                continue
            colour = VERDICT_COLOURS[verdict]
            ax.plot(row["ratio_ci95"], [i, i], color=colour, lw=2, gid=f"ratio-interval-{name}")
            ax.plot([row["ratio"]], [i], "o", color=colour, gid=f"verdict-{verdict}-{name}")
        ax.axvline(1, color="black", lw=0.8, gid="ratio-one")
        s = result["summary"]
        handles = [Line2D([], [], marker="o", ls="", color=c, label=v) for v, c in VERDICT_COLOURS.items()
                   if any(r["verdict"] == v for r in rows)]
        if s["geomean_ratio"] is not None:
            lo, hi = s["geomean_ratio_ci95"]
            colour = VERDICT_COLOURS[s["verdict"]]
            ax.axvspan(lo, hi, color=colour, alpha=0.15, lw=0, gid="geomean-interval")
            handles.append(ax.axvline(s["geomean_ratio"], color=colour, ls="--", gid="geomean",
                                      label=f"geomean {s['geomean_ratio']:.3f} ({lo:.3f}-{hi:.3f}): {s['verdict']}"))
        ax.set_yticks(range(len(rows)), [r["case"] for r in rows], fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        names = f"A: {Path(result['a']).name}   B: {Path(result['b']).name}"
        ax.set(xlabel="B/A time per case (under 1: B is faster), with its 95% interval",
               title=f"{result.get('task')}: B against A per case\n{names}")

    return Chart("comparison", 1.5 + 0.32 * len(rows), draw)


# -- files -----------------------------------------------------------------------------------

def figure(charts: list[Chart]):
    """One matplotlib figure, the charts stacked, on the Agg canvas (no pyplot, no GUI)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, sum(c.height_in for c in charts)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(charts), 1, squeeze=False, height_ratios=[c.height_in for c in charts])[:, 0]
    for chart, ax in zip(charts, axes):
        chart.draw(ax)
        ax.set_gid(chart.gid)
    return fig


def save(out: Path, charts: list[Chart], runs: list[dict], labels: list[str], comparison: dict | None) -> None:
    """The charts as one figure (.png, .svg) or one page (.html); an SVG's text kept as text
    (searchable, and a fraction of the size of glyphs drawn as paths)."""
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none"}):
        if out.suffix == ".html":
            out.write_text(page(charts, runs, labels, comparison))
        else:
            figure(charts).savefig(out, format=out.suffix[1:], dpi=120)


def inline_svg(chart: Chart) -> str:
    """One chart as an <svg> element; the ids matplotlib numbers in every figure alike (figure_1,
    text_1, ...) made the chart's own, so none repeats in the page."""
    buffer = io.StringIO()
    figure([chart]).savefig(buffer, format="svg")
    text = buffer.getvalue()
    return re.sub(r'id="([A-Za-z][\w.]*_\d+)"', rf'id="{chart.gid}-\1"', text[text.index("<svg"):])


STYLE = """body { font-family: sans-serif; margin: 1.5em auto; max-width: 1000px; color: #222; }
figure.chart { margin: 1em 0; } figure.chart svg { width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }"""


def page(charts: list[Chart], runs: list[dict], labels: list[str], comparison: dict | None) -> str:
    """One self-contained HTML page: the charts inline as SVG, then the results' tables."""
    esc = html.escape
    title = f"kbench: {runs[0]['task']} / {runs[0]['suite']}" if runs else f"kbench compare: {comparison['task']}"
    who = ([f"A: {comparison['a']}", f"B: {comparison['b']}"] if comparison is not None
           else [f"{runs[0]['submission']} on {runs[0]['device'].get('name', '?')}"])
    body = [f"<h1>{esc(title)}</h1><p>{'<br>'.join(map(esc, who))}</p>"]
    body += [f'<figure class="chart" id="chart-{esc(c.gid)}">{inline_svg(c)}</figure>' for c in charts]
    if comparison is not None:
        table, _ = render(*compare_rows(comparison), fmt="html")
        notes = [compare_summary(comparison)] + [f"warning: {w}" for w in comparison.get("warnings", [])]
        body.append(f'<section class="results"><h2>B against A</h2>{table}'
                    + "".join(f"<p>{esc(n)}</p>" for n in notes) + "</section>")
    for run, label in zip(runs, labels):
        table, _ = render(*case_rows(run), fmt="html")
        device = run["device"]
        body.append(f'<section class="results"><h2>{esc(label or run["submission"])}</h2>'
                    f"<p>{esc(summary_line(run))}</p>{table}"
                    f"<p>{esc(device.get('name', '?'))}: copy {device.get('copy_gbps')} GB/s, bf16 matmul "
                    f"{device.get('matmul_bf16_tflops')} TFLOP/s (measured); kbench {esc(run.get('kbench_version', '?'))}"
                    f"</p></section>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")
