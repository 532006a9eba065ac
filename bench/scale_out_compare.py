"""The scale-out figures from bench/scale_out.sh's folder: wall times, agreement, where time went.

Wall times of the one-GPU and the two-GPU ranking, submissions per hour, and per case whether
the two runs' medians agree: the loose reading (their 95% intervals overlap) and kbench
compare's, which is stricter (the 95% interval of B/A, each case's noise and the processes'
shared term combined, contains 1: SAME or UNSURE; overlapping intervals can still give FASTER
or SLOWER). Then where each submission's time went, and the fault run's notes.

    python3 bench/scale_out_compare.py /tmp/scale_out COMMIT
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kbench.stats.compare import compare_runs


def main(folder: Path, commit: str) -> None:
    one = json.loads((folder / "plain.json").read_text())["runs"]
    two = json.loads((folder / "scaled.json").read_text())["runs"]
    wall1 = float((folder / "plain.wall").read_text())
    wall2 = float((folder / "scaled.wall").read_text())
    cards = (folder / "gpus.txt").read_text().strip().replace("\n", "; ")
    print(f"commit {commit}; cards: {cards}")
    print(f"plain run (one GPU): {wall1:.1f} s, {3600 * len(one) / wall1:.0f} submissions/hour")
    print(f"--gpus run: {wall2:.1f} s, {3600 * len(two) / wall2:.0f} submissions/hour; "
          f"ratio {wall2 / wall1:.2f} (target <= 0.60 on 2 GPUs)")
    overlap = same = total = 0
    print(f"{'submission':42} {'case':22} {'plain us [95%]':>24} {'--gpus us [95%] gpu':>32} overlap "
          f"{'B/A [95%]':>22} compare")
    for a, b in zip(one, two):
        assert a["submission"] == b["submission"]
        compared = compare_runs(a, b)
        verdicts = {row["case"]: row for row in compared["rows"]}
        summary = compared["summary"]
        print(f"  {a['submission']}: statuses same: "
              f"{[c['status'] for c in a['cases']] == [c['status'] for c in b['cases']]}, "
              f"geomean {a['summary']['geomean_speedup']} vs {b['summary']['geomean_speedup']}, "
              f"latency B/A {summary.get('geomean_ratio')} {summary.get('geomean_ratio_ci95')} {summary.get('verdict')}")
        for ca, cb in zip(a["cases"], b["cases"]):
            if ca["latency_ms"] is None or cb["latency_ms"] is None:
                continue
            lo1, hi1 = ca["latency_ci95_ms"]
            lo2, hi2 = cb["latency_ci95_ms"]
            ok = lo1 <= hi2 and lo2 <= hi1
            row = verdicts[ca["case"]]
            overlap += ok
            same += row["verdict"] in ("SAME", "UNSURE")
            total += 1
            print(f"{a['submission'][-42:]:42} {ca['case']:22} {ca['latency_ms'] * 1e3:7.2f} "
                  f"[{lo1 * 1e3:.2f},{hi1 * 1e3:.2f}] {cb['latency_ms'] * 1e3:7.2f} [{lo2 * 1e3:.2f},"
                  f"{hi2 * 1e3:.2f}] {cb.get('gpu')} {'yes' if ok else 'NO':>7} "
                  f"{row['ratio']} {row['ratio_ci95']} {row['verdict']}")
    print(f"medians agreeing within their intervals (overlap): {overlap}/{total}; "
          f"kbench compare SAME or UNSURE: {same}/{total}")
    print("where each submission's time went (s): ready = its workers' start (the slower target's),"
          " contexts = their load's device step (CUDA's context, the timer), cases = the cases' walls,"
          " rest = the run or unit's wall besides")
    for a, b in zip(one, two):
        wall_a, wall_b = a.get("wall", {}), b.get("wall", {})
        print(f"  {a['submission'][-42:]:42} plain {time_split(wall_a.get('total_s'), wall_a.get('startup', {}), a['cases'])}")
        for unit in wall_b.get("units", []):
            cases = [c for c in b["cases"] if c["case"] in unit["cases"]]
            print(f"  {'':42} {unit['gpu']} {time_split(unit.get('wall_s'), unit.get('startup', {}), cases)}")
    fault = folder / "fault.json"
    if fault.exists():
        data = json.loads(fault.read_text())
        runs = data.get("runs", [data])
        print("fault run: " + "; ".join(f"{r['submission']}: {r['summary']['passed']}/{r['summary']['total']} "
                                        f"passed, {r['summary'].get('lost', 0)} lost, notes: {r['notes']}"
                                        for r in runs))


def time_split(wall, startup: dict, cases: list) -> str:
    """A run's or a unit's wall as its workers' start, their contexts, its cases and the rest."""
    if wall is None:
        return "-"
    ready = max((t.get("ready_s", 0.0) for t in startup.values()), default=0.0)
    contexts = max((t.get("device_s", 0.0) for t in startup.values()), default=0.0)
    in_cases = sum(c.get("wall_s") or 0.0 for c in cases)
    return (f"wall {wall:5.2f}: ready {ready:5.2f} (contexts {contexts:4.2f}), cases {in_cases:5.2f}, "
            f"rest {wall - ready - in_cases:5.2f}")


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="scale_out.sh's folder (plain.json, scaled.json, *.wall, gpus.txt)")
    ap.add_argument("commit", nargs="?", default="unknown", help="the commit the runs were made at")
    args = ap.parse_args(argv)
    main(args.folder, args.commit)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
