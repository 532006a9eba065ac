"""What a variable in the shell does to a kbench run: the same `kbench eval` with and without it.

    python3 bench/environment_probe.py qknorm --suite quick --out $OUT/env \
        --variant CUDA_LAUNCH_BLOCKING=1 --variant PYTORCH_NO_CUDA_MEMORY_CACHING=1

A variant is NAME=VALUE, exported for that run only (kbench's parent and, unless kbench drops
it, its workers). A clean run (none exported) comes first and again last, so the card's drift
between runs shows. Per run: exit code, wall time, the geomean of the submission's medians
(us) and its speedup over the baseline, the cases that carried the "could not be enqueued ahead of the device" note, the run's
notes that name the variable, and `kbench compare` of the first clean run against it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.records import geomean  # noqa: E402


def run_eval(task: str, suite: str, env_extra: dict, out: Path, extra: list[str], limit_s: float) -> dict:
    env = {**os.environ, **env_extra}
    started = time.monotonic()
    cmd = [sys.executable, "-m", "kbench", "eval", f"submissions/{task}", "--suite", suite,
           "--json", str(out), *extra]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit_s)
        code, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        code, tail = "timeout", ""
    row = {"exit": code, "wall_s": round(time.monotonic() - started, 1), "tail": tail}
    if out.exists():
        run = json.loads(out.read_text())
        cases = [c for c in run["cases"] if c.get("latency_ms")]
        row["geomean_us"] = round(1e3 * geomean([c["latency_ms"] for c in cases]), 3) if cases else None
        row["not_held"] = [c["case"] for c in run["cases"]
                           if any("could not be enqueued" in n for n in c.get("notes", []))]
        row["run_notes"] = run.get("notes", [])
        row["statuses"] = [c["status"] for c in run["cases"]]
        row["speedup"] = run["summary"].get("geomean_speedup")
    return row


def compare(a: Path, b: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "kbench", "compare", str(a), str(b)], cwd=ROOT,
                          capture_output=True, text=True)
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    return " | ".join(lines[-3:])   # the verdict lines: geomean ratio, counts, warnings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variant", action="append", default=[], help="NAME=VALUE (repeatable)")
    ap.add_argument("--limit-s", type=float, default=300.0, help="per run")
    ap.add_argument("extra", nargs="*", help="more `kbench eval` arguments (after --)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [("clean", {})] + [(v, dict([v.split("=", 1)])) for v in args.variant] + [("clean-again", {})]
    rows = {}
    for name, env_extra in runs:
        path = args.out / f"{args.task}-{name.replace('=', '_').replace(':', '_')}.json"
        rows[name] = run_eval(args.task, args.suite, env_extra, path, args.extra, args.limit_s)
        rows[name]["json"] = str(path)
        if name != "clean" and path.exists() and Path(rows["clean"]["json"]).exists():
            rows[name]["vs_clean"] = compare(Path(rows["clean"]["json"]), path)
        r = rows[name]
        print(f"{name:48s} exit {r['exit']!s:7s} wall {r['wall_s']:6.1f} s  geomean "
              f"{r.get('geomean_us')} us  speedup {r.get('speedup')}  not held: {len(r.get('not_held', []))}/{len(r.get('statuses', []))}"
              f"  statuses {sorted(set(r.get('statuses', [])))}", flush=True)
        for note in r.get("run_notes", []):
            print(f"    run note: {note}")
        if "vs_clean" in r:
            print(f"    vs clean: {r['vs_clean']}")
        if r["exit"] not in (0,):
            print("    tail: " + r["tail"].replace("\n", "\n          "))
    (args.out / f"{args.task}-summary.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
