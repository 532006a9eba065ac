"""Does a kernel's figure depend on being called right after itself? Any task, through kbench's
CallTimer in one plain process, with a model's other work put between the primer and the call.

    python3 bench/interference_probe.py TASK [--suite quick] [--cases a,b] [--calls 40]
    (after `source bench/gpu_env.sh`; a GPU is needed)

kbench calls a kernel right after an untimed call of itself (the primer). Until the interlude
(kbench/interlude.py) nothing else of its context ran between; in a model, other layers' kernels
do. For block_sparse_attn's bundled kernel that mattered more than the L2 flush: inside a stack
of transformer layers it ran 10% slower than kbench read it, and any sizable other kernel before
the call did the same (bench/bsa_in_model.py; docs/measurement.md, "What a call's own previous
call leaves").

Per case, for the bundled submission and the task's first baseline, medians of `--calls` calls
on 6 input sets made ahead (cycled), with between primer and gate:
- nothing: kbench's protocol before the interlude;
- one layer: a transformer layer without its attention (hidden 2048, 4096 tokens, ~100 MB of
  weights: a layer norm, QKV, output and 4x MLP projections, the copies between);
- the other target's call, on the case's first inputs;
- kbench's interlude: the protocol today.
The ratio to "nothing" is what that state is worth to the kernel; the 95% interval is the
median's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bsa_in_model import Stack, plain_us  # noqa: E402  (bench/ is the script's folder)
from crosscheck import bundled_and_baseline  # noqa: E402
from kbench.runner import Options, Runner  # noqa: E402
from kbench.timing import summarize  # noqa: E402


def between_row(target, name: str, work, task, case, sets: list, calls: int, interlude: bool,
                base: float | None) -> float:
    """`calls` calls of `target` with `work` between primer and gate (kbench's interlude after it
    when `interlude`): one printed row, the median, its 95% interval and the ratio to `base` (None:
    this row is the base). Returns the base for the rows after it."""
    us = plain_us(target, work, task, case, sets, calls, interlude=interlude)
    s = summarize([x / 1e3 for x in us])
    base = base or s.median
    print(f"  {target.label:30s} {name:32s} {s.median * 1e3:9.2f} [{s.ci_low * 1e3:.2f}, {s.ci_high * 1e3:.2f}]"
          f"  x{s.median / base:.4f}", flush=True)
    return base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: the whole suite)")
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    task, targets, cases = bundled_and_baseline(args.task, args.suite, args.cases)
    layer = Stack((1, 16, 4096, 128), 1)
    for case in cases:
        runner = Runner(task, Options(device="cuda"))
        sets = [runner._make(case, 100 + i)[0] for i in range(6)]
        print(f"{case.name}: us, median [95% CI] of {args.calls} calls", flush=True)
        for t in targets:
            other = next(o for o in targets if o is not t)
            # prepare each time: it undoes what a call changes in its inputs (mla_decode's appended cache row)
            works = {"nothing": lambda: None, "one layer": layer.without_attention,
                     "the other target's call": lambda: other.invoke(other.prepare(sets[0])),
                     "kbench's interlude": lambda: None}
            base = None
            for name, work in works.items():
                base = between_row(t, name, work, task, case, sets, args.calls,
                                   interlude=name == "kbench's interlude", base=base)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
