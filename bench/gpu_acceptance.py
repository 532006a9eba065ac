"""The GPU acceptance run: is kbench's timing repeatable and honest on this card? Every check, one table.

    bash bench/gpu_acceptance.sh            # on the GPU host, flashinfer wheels carried

Runs kbench as a user would (the `kbench` CLI in subprocesses, wall time of each whole
command) and checks, per task: the bundled solution passes `quick` and `full` three times
in a row with no flag; two `full` runs agree (`kbench compare a.json b.json`); `kbench
compare X X` on `quick` finds no difference; kbench's medians agree with the same protocol
in plain processes, one a target (bench/crosscheck.py --only); each command's wall time. Then
the honest corpus, the hostile corpus and the GPU tests, and how fast a kernel that raises on
every case is rejected. Writes every log and JSON under --out and prints a pass/fail table.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("qknorm", "mla_decode", "block_sparse_attn")
LIMITS_S = {"quick": 30.0, "full": 120.0}
REJECT_LIMIT_S = 15.0
REFERENCE_NOISE, REFERENCE_BUDGET_S = 0.003, 4.0   # bench/crosscheck.py's stop rule here
COVERED_BY_EVAL_RUNS = ("tasks/block_sparse_attn/test_block_sparse_attn.py::test_bundled_solution_on_gpu",
                        "tasks/qknorm/test_qknorm.py::test_bundled_solution_passes_unflagged",
                        "corpora/test_hostile.py::test_bundled_solution_passes_clean_on_gpu")


class Table:
    def __init__(self):
        self.rows: list[tuple[str, bool, str]] = []

    def add(self, check: str, ok: bool, detail: str) -> None:
        self.rows.append((check, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'}  {check}: {detail}", flush=True)

    def render(self) -> str:
        width = max(len(c) for c, _, _ in self.rows)
        lines = [f"{'check':{width}s}  result  detail", "-" * (width + 40)]
        lines += [f"{c:{width}s}  {'pass' if ok else 'FAIL':6s}  {d}" for c, ok, d in self.rows]
        passed = sum(ok for _, ok, _ in self.rows)
        lines.append(f"{passed}/{len(self.rows)} checks passed")
        return "\n".join(lines)


def run(cmd: list[str], out: Path, name: str, limit: float) -> tuple[int, float, str]:
    """Run a command, log it to out/name.log; (exit code, wall seconds, last lines)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit, check=False)
        code, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, text = 124, f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {limit:g} s"
    wall = time.perf_counter() - start
    (out / f"{name}.log").write_text(f"$ {' '.join(cmd)}\n{text}\n[exit {code}, {wall:.1f} s]\n")
    tail = " | ".join(line for line in text.strip().splitlines()[-3:])
    return code, wall, tail[-300:]


def kbench(*args) -> list[str]:
    return [sys.executable, "-m", "kbench", *args]


def clean(result_path: Path) -> tuple[bool, str]:
    data = json.loads(result_path.read_text())
    bad = [f"{c['case']} {c['status']}{' flagged' if c['flags'] else ''}"
           for c in data["cases"] if c["status"] != "passed" or c["flags"]]
    s = data["summary"]
    # the SM clock kbench read before the calls (per case and target): shown, not judged
    clocks = [c[k] for c in data["cases"] for k in ("sm_clock_mhz", "baseline_sm_clock_mhz") if c.get(k)]
    clock = f"; SM clock {min(clocks)}-{max(clocks)} MHz" if clocks else ""
    detail = f"{s['passed']}/{s['total']} passed, geomean {s['geomean_speedup']}{clock}"
    return not bad and s["fatal"] is None, detail + (f"; {', '.join(bad[:3])}" if bad else "")


def eval_runs(task: str, suite: str, runs: int, out: Path, table: Table) -> list[Path]:
    paths = []
    for i in range(1, runs + 1):
        path = out / f"{task}-{suite}-{i}.json"
        code, wall, tail = run(kbench("eval", f"submissions/{task}", "--suite", suite, "--json", str(path), "-q"),
                               out, path.stem, 300)
        ok, detail = clean(path) if path.exists() else (False, tail)
        table.add(f"{task} {suite} run {i} clean, exit 0", ok and code == 0, f"{detail} (exit {code})")
        table.add(f"{task} {suite} run {i} wall <= {LIMITS_S[suite]:g} s", wall <= LIMITS_S[suite], f"{wall:.1f} s")
        paths.append(path)
    return paths


def process_spread(runs: list[Path]) -> str:
    """What the full runs say about their processes (bench/repeat_runs.py's components): the
    evidence, run after run, on whether a run's processes share what moves its geomean."""
    sys.path.insert(0, str(ROOT / "bench"))
    import repeat_runs

    try:   # a diagnostic: it never costs the table its row
        c = repeat_runs.components([repeat_runs.run_figures(json.loads(p.read_text())) for p in runs if p.exists()])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        return f"; processes: not read ({type(exc).__name__}: {exc})"
    if c is None:
        return ""
    return (f"; {len(runs)} runs: per-process SD {c['process_sd_pct']}%, run SD {c['run_sd_pct']}%, "
            f"shared {c['shared_var_pct2']} %^2")


def repeatability(task: str, a: Path, b: Path, out: Path, table: Table, runs: list[Path] = ()) -> None:
    path = out / f"{task}-full-compare.json"
    _, _, tail = run(kbench("compare", str(a), str(b), "--json", str(path)), out, path.stem, 60)
    if not path.exists():
        table.add(f"{task} full run 1 vs 2", False, tail)
        return
    data = json.loads(path.read_text())
    moved = [r["case"] for r in data["rows"] if r["verdict"] in ("FASTER", "SLOWER", "FAILED")]
    s = data["summary"]
    lo, hi = s["geomean_ratio_ci95"] or (None, None)
    ok = not moved and s["geomean_ratio"] is not None and abs(s["geomean_ratio"] - 1) <= 0.01 and lo <= 1 <= hi
    table.add(f"{task} full run 1 vs 2: no case moved, geomean within 1%", ok,
              f"geomean {s['geomean_ratio']} [{lo}, {hi}]; moved: {', '.join(moved) or 'none'}"
              + process_spread(list(runs)))


def self_compare(task: str, out: Path, table: Table) -> None:
    path = out / f"{task}-quick-XX.json"
    _, wall, tail = run(kbench("compare", f"submissions/{task}", f"submissions/{task}", "--suite", "quick",
                               "--json", str(path), "-q"), out, path.stem, 300)
    if not path.exists():
        table.add(f"{task} compare X X (quick)", False, tail)
        return
    rows = json.loads(path.read_text())["rows"]
    moved = [f"{r['case']} {r['verdict']} {r['ratio']}" for r in rows if r["verdict"] not in ("SAME", "UNSURE")]
    table.add(f"{task} compare X X (quick): every case SAME/UNSURE", not moved,
              f"{len(rows)} cases; {', '.join(moved) or 'none moved'} ({wall:.0f} s)")


def crosscheck(task: str, out: Path, table: Table) -> Path | None:
    """The plain-process figures, one process per target as kbench runs each in its own workers (run
    first: it also builds flashinfer's JIT modules, so the kbench runs after it time a warm machine).
    With both targets in one process the submission read up to 5.6% above kbench, alone within 1.8%
    (H100, qknorm quick; docs/measurement.md, "Checking the method")."""
    # The reference is timed to a tighter noise target than kbench's default (0.3%, not 1%):
    # with both figures at 1% their difference alone is ~1.4%, and the check is 2%.
    rows: dict[str, dict] = {}
    for label in ("baseline", "submission"):
        where = out / f"{task}-plain-{label}"
        code, _, tail = run([sys.executable, "bench/crosscheck.py", task, "--suite", "quick", "--only", label,
                             "--out", str(where), "--noise", str(REFERENCE_NOISE), "--budget", str(REFERENCE_BUDGET_S)],
                            out, f"{task}-crosscheck-{label}", 300)
        path = where / f"crosscheck-{task}-quick.json"
        if code != 0 or not path.exists():
            table.add(f"{task} plain-process protocol (bench/crosscheck.py --only {label})", False, tail)
            return None
        for row in json.loads(path.read_text()):
            rows.setdefault(row["case"], {}).update(row)
    merged = out / f"crosscheck-{task}-quick.json"
    merged.write_text(json.dumps(list(rows.values()), indent=1))
    return merged


def agreement(task: str, plain: Path | None, kbench_json: Path, table: Table) -> None:
    if plain is None or not kbench_json.exists():
        return
    sys.path.insert(0, str(ROOT / "bench"))
    from crosscheck import agreement as agree

    lines = agree(json.loads(plain.read_text()), json.loads(kbench_json.read_text()))
    worst = max((abs(line[2] / line[3] - 1) for line in lines), default=0.0)
    for check, col in (("within 2% or 0.15 us", 5), ("within the difference's 95% interval", 6)):
        off = [f"{case} {label} {iso * 1e3:.2f} vs {ref * 1e3:.2f} us" + (" (host-timed: not held behind "
               "the gate, so the host's speed is in both figures)" if flags[-1] else "")
               for case, label, iso, ref, *flags in lines if not flags[col - 4]]
        table.add(f"{task} kbench vs plain process (quick): {check}", bool(lines) and not off,
                  f"{len(lines)} medians, worst {worst * 100:.1f}%; off: {', '.join(off[:4]) or 'none'}")


def gpu_tests(out: Path, table: Table, limit: float = 400) -> None:
    """The GPU tests in one pytest process (one start-up, not two), reported as two rows: the
    honest corpus, and the hostile corpus with the tasks' GPU tests."""
    # The GPU tests of the bundled solutions are left out: the eval runs above check the same
    # thing on every case (a minute of the 9 this script may take).
    covered = [f"--deselect=tests/{t}" for t in COVERED_BY_EVAL_RUNS]
    code, wall, _ = run([sys.executable, "-m", "pytest", "-q", "-rA", "--durations=40", "-p", "no:cacheprovider", "-m", "gpu",
                         "tests/", *covered], out, "gpu-tests", limit)
    lines = (out / "gpu-tests.log").read_text().splitlines()
    # -rA's summary: "PASSED tests/x.py::test", "SKIPPED [n] tests/x.py:line: why" (a skip is not a pass)
    outcomes = [(l.split()[0], l.split()[2] if l.startswith("SKIPPED") else l.split()[1])
                for l in lines if l.startswith(("PASSED ", "FAILED ", "ERROR ", "SKIPPED "))]
    for name, honest in (("honest corpus passes clean", True), ("hostile corpus caught + GPU tests", False)):
        mine = [(o, t) for o, t in outcomes if ("corpora/test_honest.py" in t) == honest]
        bad = [t.split("::")[-1] for o, t in mine if o != "PASSED"]
        table.add(name, code in (0, 1) and bool(mine) and not bad,
                  f"{len(mine) - len(bad)}/{len(mine)} passed{'; not: ' + ', '.join(bad[:4]) if bad else ''} "
                  f"(pytest exit {code}, {wall:.0f} s for both)")


def reject_fast(out: Path, table: Table) -> None:
    code, wall, _ = run(kbench("eval", "tests/fixtures/qknorm/raises", "--task", "qknorm", "--suite", "full", "-q"),
                        out, "raises-full", 120)
    table.add(f"a submission raising on every qknorm full case: rejected in <= {REJECT_LIMIT_S:g} s",
              code == 1 and wall <= REJECT_LIMIT_S, f"exit {code} in {wall:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tasks", default=",".join(TASKS), help='comma-separated; "" runs only the GPU tests')
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--suites", default="quick,full", help="which suites' checks to run")
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    table = Table()
    start = time.perf_counter()
    suites = [s for s in args.suites.split(",") if s]
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(TASKS)) + sorted(set(suites) - {"quick", "full"})
    if unknown:
        ap.error(f"unknown task or suite: {', '.join(unknown)}")
    if not tasks and args.skip_tests:
        ap.error('nothing to check: --tasks "" runs only the GPU tests, which --skip-tests leaves out')
    for task in tasks:
        if "quick" in suites:
            plain = crosscheck(task, args.out, table)
            quick = eval_runs(task, "quick", args.runs, args.out, table)
            agreement(task, plain, quick[0], table)
            self_compare(task, args.out, table)
        if "full" in suites:
            full = eval_runs(task, "full", args.runs, args.out, table)
            if len(full) >= 2 and all(p.exists() for p in full[:2]):
                repeatability(task, full[0], full[1], args.out, table, full)
        if task == "qknorm":
            # After qknorm's runs, not first: as the machine's first command it timed a cold start
            # (bytecode, CUDA init and 16 workers' imports from nothing): 15.3-16.0 s against 7.1-8.8 s warm.
            reject_fast(args.out, table)
    if not args.skip_tests:
        gpu_tests(args.out, table)
    text = table.render() + f"\n(total {time.perf_counter() - start:.0f} s)"
    (args.out / "acceptance.txt").write_text(text + "\n")
    print("\n" + text)
    return 0 if all(ok for _, ok, _ in table.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
