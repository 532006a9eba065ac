"""The same `kbench eval` run N times in a row, per variant: how far a whole run's geomean
moves from run to run, and whether the move is shared by the run's processes (a run-level
shift) or is one process off (a process offset).

    python3 bench/repeat_runs.py qknorm --suite full --runs 4 --out /tmp/rr \
        --variant default= --variant nobase=--baseline,none --variant pool4=--pool,4
    python3 bench/repeat_runs.py --summarize /tmp/rr     # the tables again, from the JSON

A variant is NAME=ARGS, ARGS comma-separated extra `kbench eval` arguments. The runs of the
variants alternate (run 1 of each, then run 2 of each...), so a drift of the card over the
runs hits them all. Per run: the submission's and the baseline's geomean over the cases,
and each pool process's offset (a case + process fit, kbench.stats.spread.fit_offsets); per
variant: the largest and the standard deviation of the runs' geomeans, the largest ratio between two
runs (what `kbench compare a.json b.json` calls the geomean ratio), and that spread split into
what each process draws and what a run's processes share (`components`), with the chance that
two runs agree within 1% at a pool of 2, 4 or 8.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.run.records import geomean
from kbench.stats.spread import fit_offsets, offset_cells, offset_variance


def run_figures(run: dict) -> dict:
    """One run's geomeans (us), each pool process's offset (%) and the per-process variance the
    offsets give (%^2, from the differences within each group of linked processes)."""
    cases = [c for c in run["cases"] if c.get("latency_ms")]
    out = {"sub_us": 1e3 * geomean([c["latency_ms"] for c in cases]) if cases else None, "base_us": None,
           "sub_process_pct": {}, "base_process_pct": {}}
    timed = [c for c in cases if c.get("baseline_latency_ms")]
    if timed:
        out["base_us"] = 1e3 * geomean([c["baseline_latency_ms"] for c in timed])
    for side, who in (("case", "sub"), ("baseline", "base")):
        cells = offset_cells(cases, side)
        fitted = fit_offsets(cells)
        by_process = sorted(fitted.offsets.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))   # (card, id)
        out[f"{who}_process_pct"] = {(pid if gpu is None else f"{gpu}:{pid}"): round(100 * v, 2)
                                     for (gpu, pid), v in by_process}
        variance = offset_variance(cells, fitted)
        out[f"{who}_process_var_pct2"] = round(1e4 * variance[0], 4) if variance else None
    return out


def spread(values: list[float]) -> dict:
    """Run-to-run spread of one variant's geomeans: max/min ratio and the SD in percent."""
    values = [v for v in values if v]
    if len(values) < 2:
        return {"runs": len(values), "max_ratio": None, "sd_pct": None}
    logs = [math.log(v) for v in values]
    return {"runs": len(values), "max_ratio": round(max(values) / min(values), 4),
            "sd_pct": round(100 * statistics.stdev(logs), 2)}


def components(runs: list[dict], key: str = "sub") -> dict | None:
    """How much of the run-to-run spread the processes explain, in percent: the per-process SD
    (from the processes' offsets within each run), the run geomeans' SD, and the variance the
    processes of a run share, Var(run) - s^2 / K (one-way variance components, K the run's
    processes; negative when a run's processes offset each other). And the chance that two runs'
    geomeans land within 1%: at K from the runs' own spread, at larger pools as the model
    predicts (only where the shared part is not negative)."""
    values = [r[f"{key}_us"] for r in runs if r[f"{key}_us"]]
    variances = [r[f"{key}_process_var_pct2"] for r in runs if r.get(f"{key}_process_var_pct2") is not None]
    if len(values) < 3 or len(variances) < 3:
        return None
    within = statistics.fmean(variances)   # s^2, %^2: from the offsets within each group of processes
    k = round(statistics.fmean(len(r[f"{key}_process_pct"]) for r in runs if r[f"{key}_process_pct"]))
    between = statistics.variance([100 * math.log(v) for v in values])   # %^2
    shared = between - within / k

    def within_1pct(run_variance: float) -> float:   # |log ratio of two runs| < 1%
        return math.erf(1.0 / math.sqrt(2 * 2 * run_variance)) if run_variance > 0 else 1.0

    chance = {k: within_1pct(between)}
    if shared >= 0:   # else the processes are not independent draws, and the model says nothing
        chance.update({pool: within_1pct(within / pool + shared) for pool in (4, 8) if pool > k})
    return {"process_sd_pct": round(math.sqrt(within), 2), "run_sd_pct": round(math.sqrt(between), 2),
            "shared_var_pct2": round(shared, 3), "processes": k,
            "p_within_1pct": {pool: round(p, 2) for pool, p in chance.items()}}


def summarize(folder: Path) -> dict:
    """Every variant's runs, read back from ``folder``/VARIANT-N.json."""
    by_variant = defaultdict(list)
    for path in sorted(folder.glob("*.json"), key=lambda p: (p.stem.rsplit("-", 1)[0], int(p.stem.rsplit("-", 1)[1]))):
        variant, _ = path.stem.rsplit("-", 1)
        by_variant[variant].append(run_figures(json.loads(path.read_text())))
    return {v: {"runs": runs, "sub": spread([r["sub_us"] for r in runs]),
                "base": spread([r["base_us"] for r in runs]),
                "components": {"sub": components(runs, "sub"), "base": components(runs, "base")}}
            for v, runs in by_variant.items()}


def report(summary: dict) -> None:
    for variant, s in summary.items():
        print(f"== {variant}: submission runs {s['sub']}, baseline runs {s['base']}")
        for i, r in enumerate(s["runs"], 1):
            base = f"{r['base_us']:.4f}" if r["base_us"] else "-"
            print(f"  run {i}: submission {r['sub_us']:.4f} us (processes {r['sub_process_pct']}), "
                  f"baseline {base} us (processes {r['base_process_pct']})")
        for who, c in s["components"].items():
            if c:
                chance = ", ".join(f"pool {pool}: {p}" for pool, p in c["p_within_1pct"].items())
                print(f"  {who}: per-process SD {c['process_sd_pct']}%, run SD {c['run_sd_pct']}% over "
                      f"{c['processes']} processes, variance a run's processes share {c['shared_var_pct2']} %^2; "
                      f"two runs within 1%: {chance}")


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, args = text.partition("=")
    if not name or "-" in name or "/" in name:
        raise argparse.ArgumentTypeError(f"variant {text!r}: NAME=ARGS, a NAME without '-' or '/'")
    return name, [a for a in args.split(",") if a]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", nargs="?")
    ap.add_argument("--suite", default="full")
    ap.add_argument("--submission", default=None, help="default: submissions/<task>")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--variant", type=parse_variant, action="append", default=None)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--summarize", type=Path, help="print the tables from an earlier --out folder")
    args = ap.parse_args()
    if args.summarize:
        report(summarize(args.summarize))
        return 0
    if not args.task or not args.out:
        ap.error("a task and --out are needed (or --summarize FOLDER)")
    variants = args.variant or [("default", [])]
    args.out.mkdir(parents=True, exist_ok=True)
    submission = args.submission or f"submissions/{args.task}"
    for i in range(1, args.runs + 1):
        for name, extra in variants:
            path = args.out / f"{name}-{i}.json"
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "kbench", "eval", submission, "--suite", args.suite,
                                   "--json", str(path), "-q", *extra], capture_output=True, text=True, check=False)
            (args.out / f"{name}-{i}.log").write_text(done.stdout + done.stderr)
            print(f"{name} run {i}: exit {done.returncode}, {time.perf_counter() - began:.1f} s", flush=True)
    report(summarize(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
