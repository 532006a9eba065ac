"""The current figures of kbench runs as Markdown: what docs/results.md holds.

    python bench/results.py RUN.json [RUN.json ...] [--commit SHA] [--command CMD] \
        [--repeats RUN-1.json RUN-2.json ...] > docs/results.md

Each RUN.json is what `kbench eval SUBMISSION --json RUN.json` wrote on a GPU: one run record, or
{"runs": [...]} for several submissions. The page has, per task and suite, one table per run:
the card, the date, kbench's commit, the command, and per case the device time with its 95%
interval, the baseline's time, the speedup, the share of the roofline reached (roofline / time),
% of the card's copy bandwidth, TFLOP/s and the host's time inside the call; then the geomean
speedup and the task's native score. Runs of one task and suite on several cards also get their
device times side by side, one column per card.

--repeats (once per group of back-to-back runs of one task, e.g. bench/repeat_runs.py's) adds a
"Run to run" table: per run the copy and matmul ceilings the roofline used and this run's own
fresh reading of each, the geomean speedup; per case the share of the roofline reached, its
lowest and highest over the runs and how far apart they are.

--commit and --command, given once, apply to every file; given once per file, to each in order.
Without them the commit is the record's own when it carries one, and the command is rebuilt from
the record (`kbench eval SUBMISSION --suite S --baseline B`, with the options that change a timing).

Refused with one line on stderr and exit 2: a missing file, a file that is not JSON, JSON that is
not a run record, and a CPU-mode run (its times are the Triton interpreter's wall clock).
Standard library only: it reads the JSON, it never imports kbench.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

RECORD_KEYS = ("task", "suite", "cases", "timing")
COMMIT_KEYS = ("kbench_commit", "commit")


class Refused(Exception):
    """A file this script will not turn into figures; the message names it and why."""


def load_runs(path: str) -> list[dict]:
    """The run records in ``path``, or Refused."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise Refused(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(f"{path}: cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Refused(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    runs = data.get("runs") if isinstance(data, dict) and "runs" in data else [data]
    if not isinstance(runs, list) or not runs:
        raise Refused(f"{path}: no run records in it")
    for run in runs:
        if (not isinstance(run, dict) or any(k not in run for k in RECORD_KEYS)
                or not isinstance(run["cases"], list) or not isinstance(run["timing"], dict)):
            raise Refused(f"{path}: not a kbench run record (write one with kbench eval ... --json FILE)")
        if run["timing"].get("meaningful") is not True:
            raise Refused(f"{path}: {run['task']}/{run['suite']} ran in CPU mode: its times are the "
                          "interpreter's wall clock, not figures (run it on a GPU)")
    return runs


# ---------------------------------------------------------------- formatting

def us(ms) -> str:
    """A time given in ms, written in microseconds."""
    if ms is None:
        return "-"
    value = ms * 1e3
    return f"{value:.2f}" if value < 100 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def interval(pair) -> str:
    if not pair or len(pair) != 2 or None in pair:
        return "-"
    return f"[{us(pair[0])}, {us(pair[1])}]"


def ratio(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}x"


def percent(x) -> str:
    if x is None:
        return "-"
    return f"{x:.2g}%" if x < 10 else f"{x:.0f}%"


def rate(x) -> str:
    """TFLOP/s: three figures below 100, whole numbers above."""
    if x is None:
        return "-"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def geomean(xs) -> float | None:
    xs = list(xs)
    if not xs or any(x is None or x <= 0 for x in xs):
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; a column with nothing in any row (every cell "-") is left out."""
    keep = [i for i in range(len(headers)) if i == 0 or any(row[i] != "-" for row in rows)]
    lines = ["| " + " | ".join(headers[i] for i in keep) + " |",
             "|" + "|".join("---" for _ in keep) + "|"]
    lines += ["| " + " | ".join(row[i] for i in keep) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------- one run

def cards(run: dict) -> list[dict]:
    """The calibration of every card the run used (several under --gpus / --ray)."""
    devices = run.get("devices")
    if isinstance(devices, dict) and devices:
        used = [c.get("gpu") for c in run["cases"] if c.get("gpu") in devices]
        labels = list(dict.fromkeys(used)) or list(devices)
        return [devices[label] for label in labels]
    return [run.get("device") or run.get("calibration") or {}]


def card_name(run: dict) -> str:
    names = list(dict.fromkeys(c.get("name") or "unknown card" for c in cards(run)))
    return " + ".join(names)


def card_line(run: dict) -> str:
    """The card(s) and what kbench measured of them."""
    parts = []
    for card in cards(run):
        bits = []
        if card.get("sm_count"):
            bits.append(f"{card['sm_count']} SMs")
        if card.get("driver_version"):
            bits.append(f"driver {card['driver_version']}")
        if card.get("copy_gbps"):
            bits.append(f"copy {card['copy_gbps']:.0f} GB/s")
        if card.get("matmul_bf16_tflops"):
            bits.append(f"bf16 matmul {card['matmul_bf16_tflops']:.0f} TFLOP/s")
        if card.get("clocks_max_sm"):
            bits.append(f"max SM clock {card['clocks_max_sm']}")
        name = card.get("name") or "unknown card"
        parts.append(f"{name} ({', '.join(bits)})" if bits else name)
    return "; ".join(dict.fromkeys(parts))


def commit_of(run: dict, given: str | None) -> str:
    if given:
        return given
    for key in COMMIT_KEYS:
        if run.get(key):
            return str(run[key])
    return "not recorded (pass --commit)"


def command_of(run: dict, given: str | None) -> str:
    """The command given, or the one that makes this record again."""
    if given:
        return given
    timing = run["timing"]
    words = ["kbench", "eval", run.get("submission") or "SUBMISSION", "--suite", run["suite"]]
    if run.get("baseline"):
        words += ["--baseline", run["baseline"]]
    else:
        words += ["--baseline", "none"]
    if timing.get("mode") == "cuda-graph-replay":
        words.append("--cuda-graph")
    if timing.get("cuda_connections") is not None:
        words += ["--cuda-connections", str(timing["cuda_connections"])]
    if timing.get("root_seed") is not None:
        words += ["--seed", str(timing["root_seed"])]
    if timing.get("processes") not in (None, 2):   # kbench's defaults on a GPU: 2 processes, 1% noise
        words += ["--processes", str(timing["processes"])]
    if timing.get("noise_target") not in (None, 0.01):
        words += ["--noise", f"{timing['noise_target']:g}"]
    return shlex.join(words)


def timing_line(run: dict) -> str:
    timing = run["timing"]
    mode = {"cuda-events": "CUDA events", "cuda-graph-replay": "CUDA-graph replays"}.get(
        timing.get("mode"), timing.get("mode") or "?")
    bits = [mode]
    if timing.get("processes"):
        bits.append(f"{timing['processes']} processes a case")
    if timing.get("pool") and timing.get("pool") != timing.get("processes"):
        bits.append(f"pool {timing['pool']}")
    return ", ".join(bits)


def native_line(summary: dict) -> str | None:
    native = summary.get("native")
    if not isinstance(native, dict):
        return None
    name = native.get("name") or "native score"
    if native.get("value") is None:
        return f"{name}: none ({native.get('reason') or 'no reason given'})"
    details = native.get("details") or {}
    extra = ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in details.items()
                      if v is not None and not isinstance(v, (dict, list)))
    text = f"{name}: {native['value']:g} {native.get('unit', '')}".rstrip()
    if native.get("reason"):
        text += f" ({native['reason']})"
    return f"{text}; {extra}" if extra else text


def case_rows(run: dict) -> tuple[list[str], list[list[str]]]:
    base = run.get("baseline") or "baseline"
    headers = ["case", "status", "device us", "95% interval", f"{base} us", "speedup",
               "of roofline", "% copy bw", "TFLOP/s", "host us"]
    rows = []
    for case in run["cases"]:
        passed = case.get("status") == "passed"
        rows.append([
            str(case.get("case")),
            "-" if passed else str(case.get("status")),
            us(case.get("latency_ms")) if passed else "-",
            interval(case.get("latency_ci95_ms")) if passed else "-",
            us(case.get("baseline_latency_ms")),
            ratio(case.get("speedup")),
            percent(100 * case["roofline_fraction"]) if case.get("roofline_fraction") else "-",
            percent(case.get("pct_of_copy_bw")),
            rate(case.get("tflops")),
            "-" if run["timing"].get("mode") == "cuda-graph-replay" else us(case.get("host_ms")),
        ])
    return headers, rows


def run_section(run: dict, commit: str | None, command: str | None) -> list[str]:
    summary = run.get("summary") or {}
    lines = [f"#### {card_name(run)}: `{run.get('submission')}`", "",
             f"- card: {card_line(run)}",
             f"- date: {str(run.get('created') or 'not recorded')[:10]}; "
             f"kbench {run.get('kbench_version') or '?'}, commit {commit_of(run, commit)}",
             f"- command: `{command_of(run, command)}`",
             f"- timing: {timing_line(run)}", ""]
    lines += table(*case_rows(run))
    lines.append("")
    passed, total = summary.get("passed"), summary.get("total", len(run["cases"]))
    if passed is None:
        passed = sum(c.get("status") == "passed" for c in run["cases"])
    result = f"passed {passed}/{total}"
    speedup = summary.get("geomean_speedup")
    if speedup is not None:
        result += f"; geomean speedup {ratio(speedup, 3)} over {run.get('baseline')}"
    elif run.get("baseline"):
        result += "; no geomean speedup (not every case passed)"
    native = native_line(summary)
    if native:
        result += f"; {native}"
    lines.append(result + ".")
    notes = [str(n) for n in run.get("notes") or []]
    for case in run["cases"]:
        notes += [f"{case.get('case')}: flag: {f}" for f in case.get("flags") or []]
        notes += [f"{case.get('case')}: {n}" for n in case.get("notes") or []]
    if notes:
        lines.append("")
        lines += [f"- note: {n}" for n in dict.fromkeys(notes)]
    return lines + [""]


# ---------------------------------------------------------------- run to run

def spread_pct(values: list[float]) -> str:
    values = [v for v in values if v]
    return "-" if len(values) < 2 else f"{100 * (max(values) / min(values) - 1):.2f}%"


def repeat_section(runs: list[dict]) -> list[str]:
    """Back-to-back runs of one task: do the ceilings and the roofline shares hold still?"""
    first = runs[0]
    lines = [f"### Run to run: {len(runs)} back-to-back runs on {card_name(first)}", "",
             f"- command, each run: `{command_of(first, None)}`; first run {str(first.get('created'))[:16]}", ""]
    rows, copies, matmuls = [], [], []
    for i, run in enumerate(runs, 1):
        card = cards(run)[0]
        copies.append(card.get("copy_gbps"))
        matmuls.append(card.get("matmul_bf16_tflops"))
        rows.append([str(i), rate(card.get("copy_gbps")), rate(card.get("copy_gbps_this_run")),
                     rate(card.get("matmul_bf16_tflops")), rate(card.get("matmul_bf16_tflops_this_run")),
                     ratio((run.get("summary") or {}).get("geomean_speedup"), 3)])
    rows.append(["spread", spread_pct(copies), spread_pct([cards(r)[0].get("copy_gbps_this_run") for r in runs]),
                 spread_pct(matmuls), spread_pct([cards(r)[0].get("matmul_bf16_tflops_this_run") for r in runs]),
                 spread_pct([(r.get("summary") or {}).get("geomean_speedup") for r in runs])])
    lines += table(["run", "copy GB/s used", "copy GB/s fresh", "matmul TFLOP/s used", "matmul TFLOP/s fresh",
                    "geomean speedup"], rows) + [""]
    names = list(dict.fromkeys(c.get("case") for c in first["cases"]))
    case_rows_, worst = [], 0.0
    for name in names:
        # from the roofline and the time (the record's roofline_fraction is rounded to 4 places)
        shares = [c["roofline_ms"] / c["latency_ms"] for r in runs for c in r["cases"]
                  if c.get("case") == name and c.get("status") == "passed" and c.get("roofline_ms")
                  and c.get("latency_ms")]
        if len(shares) < 2:
            continue
        worst = max(worst, max(shares) / min(shares) - 1)
        case_rows_.append([str(name), f"{100 * min(shares):.2f}%", f"{100 * max(shares):.2f}%", spread_pct(shares)])
    lines += table(["case", "of roofline, lowest", "highest", "apart"], case_rows_) + [""]
    lines.append(f"The roofline shares of one case lie at most {100 * worst:.2f}% apart over the {len(runs)} runs.")
    return lines + [""]


# ---------------------------------------------------------------- the page

def side_by_side(entries: list[tuple[dict, str | None, str | None]]) -> list[str]:
    """Device time per case, one column per run (each naming its card), where the runs of one
    task and suite were timed on more than one card."""
    labels = []
    for run, commit, _ in entries:
        given = commit_of(run, commit)
        label = card_name(run) if given.startswith("not recorded") else f"{card_name(run)} ({given})"
        labels.append(f"{label} us")
    order = list(dict.fromkeys(c.get("case") for run, _, _ in entries for c in run["cases"]))
    rows = []
    for name in order:
        row = [str(name)]
        for run, _, _ in entries:
            case = next((c for c in run["cases"] if c.get("case") == name), None)
            ok = case is not None and case.get("status") == "passed"
            row.append(us(case.get("latency_ms")) if ok else "-" if case is None else str(case.get("status")))
        rows.append(row)
    rows.append(["geomean speedup"] + [ratio((run.get("summary") or {}).get("geomean_speedup"), 3)
                                       for run, _, _ in entries])
    return ["Device time per case on each card:", ""] + table(["case"] + labels, rows) + [""]


def page(entries: list[tuple[dict, str | None, str | None]], argv: list[str],
         repeats: list[list[dict]] = ()) -> str:
    """``entries``: (run record, --commit for it, --command for it), in the order given."""
    written_by = shlex.join(["python", "bench/results.py", *argv])
    lines = ["# Current figures", "",
             "Generated from kbench's result JSON (`kbench eval ... --json RUN.json` on a GPU) by",
             f"`{written_by}`.",
             "Do not edit it by hand: run the command again on new runs. How each figure is measured:",
             "docs/measurement.md. Each bundled kernel's design and history: submissions/<task>/README.md.",
             "Times are kbench's device time of one call in microseconds (the median over its calls and",
             "processes); compare figures only between runs on the same card.", ""]
    tasks: dict[str, dict[str, list]] = {}
    for entry in entries:
        run = entry[0]
        tasks.setdefault(run["task"], {}).setdefault(run["suite"], []).append(entry)
    for task, suites in tasks.items():
        lines += [f"## {task}", ""]
        for suite, group in suites.items():
            lines += [f"### {suite}", ""]
            if len({card_name(run) for run, _, _ in group}) > 1:
                lines += side_by_side(group)
            for run, commit, command in group:
                lines += run_section(run, commit, command)
        for runs in repeats:
            if runs[0]["task"] == task:
                lines += repeat_section(runs)
    return "\n".join(lines).rstrip() + "\n"


def per_file(values: list[str] | None, files: list[str], option: str) -> list[str | None]:
    if not values:
        return [None] * len(files)
    if len(values) == 1:
        return values * len(files)
    if len(values) == len(files):
        return values
    raise Refused(f"{option} given {len(values)} times for {len(files)} files: give it once, or once per file")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="bench/results.py", description=__doc__.split("\n\n")[0],
        epilog="example: python bench/results.py runs/qknorm-h100.json runs/qknorm-h200.json > docs/results.md")
    parser.add_argument("files", nargs="+", metavar="RUN.json", help="kbench eval --json output (GPU runs)")
    parser.add_argument("--commit", action="append", help="kbench's commit the runs were made at (once, or once per file)")
    parser.add_argument("--command", action="append", help="the command that made the runs (once, or once per file)")
    parser.add_argument("--repeats", action="append", nargs="+", default=[], metavar="RUN.json",
                        help="back-to-back runs of one task (repeatable, one group each)")
    args = parser.parse_args(argv)
    try:
        commits = per_file(args.commit, args.files, "--commit")
        commands = per_file(args.command, args.files, "--command")
        entries = [(run, commit, command)
                   for path, commit, command in zip(args.files, commits, commands)
                   for run in load_runs(path)]
        repeats = [[run for path in group for run in load_runs(path)] for group in args.repeats]
    except Refused as exc:
        print(f"bench/results.py: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(page(entries, argv, repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
