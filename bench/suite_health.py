"""How often the exact answer, rounded, fails a suite's own check (kbench/tasks/suites.py).

    python bench/suite_health.py mla_decode smoke --seeds 1000 [--device cuda] [--case NAME ...]

Prints per case the misses over the seeds; any miss means the case rejects a perfect
kernel on some inputs: the full counts behind tests/tasks/test_suite_health.py's smaller ones, and the
figures in docs/tasks.md, "Suite health".
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kbench.errors import KbenchError
from kbench.tasks.suites import exact_answer_misses, health_seeds, select_cases
from kbench.tasks.task import get_task


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("suite")
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    args = ap.parse_args()
    status = 0
    try:
        task = get_task(args.task)
        cases = select_cases(task.suite(args.suite), tuple(args.case or ()))
    except KbenchError as exc:
        print(f"suite_health: {exc}", file=sys.stderr)
        return 2
    for case in cases:
        start = time.perf_counter()
        misses, first = exact_answer_misses(task.module, case, health_seeds(case, args.seeds), args.device)
        print(f"{args.task} {args.suite} {case.name}: {misses}/{args.seeds} seeds fail "
              f"({time.perf_counter() - start:.0f} s){'; first: ' + first if first else ''}", flush=True)
        status |= misses > 0
    return status


if __name__ == "__main__":
    sys.exit(main())
