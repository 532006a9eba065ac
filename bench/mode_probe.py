"""Diagnostic: is a qknorm case's per-process speed mode fixed by the loaded kernel module?

On the H100 the bundled kernel reads kv8_q32_d64_b256 at ~5.3 us in most worker processes
and at ~5.7 us in about one of four, fixed for the (process, case) pair (docs/measurement.md,
"Processes"). Per call kbench already randomizes the buffers' placement, so what is fixed
per (process, case) is something else; the kernel's own module (its code, loaded once per
process and specialisation) is a candidate. This loads the same kernel COPIES times in one
process (a new JITFunction over the same source: the binary comes from Triton's cache, but
each copy is its own module at its own device address) and times each copy through kbench's
CallTimer, in blocks of BLOCK calls, the copies' order shuffled every round.

    python bench/mode_probe.py OUT_DIR [CASE] [COPIES] [ROUNDS]   (writes OUT_DIR/mode-<pid>.json)

Bimodal per-copy medians in one process point at the module; one mode for every copy,
differing between processes, points at something else of the process.
"""
import json
import os
import random
import statistics
import sys
from pathlib import Path

import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.call_timer import CallTimer  # noqa: E402
from kbench.runner import Options, Runner  # noqa: E402
from kbench.tasks import get_task, submission_file  # noqa: E402
from kbench.timing import flush_bytes  # noqa: E402

BLOCK = 8


def main(out_dir: Path, case_name: str, copies: int, rounds: int) -> None:
    task = get_task("qknorm")
    case = next(c for c in task.suite("full").cases if c.name == case_name)
    entry = task.contract.load(submission_file(task, ROOT / "submissions/qknorm"))
    module = entry.__globals__
    source_fn = module["_qknorm_kernel"].fn
    runner = Runner(task, Options(device="cuda"))
    inputs = runner._make(case, 0)[0]
    timer = CallTimer("cuda", flush_bytes("cuda"))
    launchers = []
    for _ in range(copies):
        module["_qknorm_kernel"] = triton.jit(source_fn)
        module["_LAUNCHERS"].clear()
        timer.run(lambda args: tuple(task.contract.call(entry, args)), lambda x: x, inputs)
        (launch,) = module["_LAUNCHERS"].values()
        launchers.append(launch)
    invokes = [(lambda args, f=f: _call(task, entry, f, args)) for f in launchers]
    times = {i: [] for i in range(copies)}
    order = list(range(copies))
    for _ in range(rounds):
        random.shuffle(order)
        for i in order:
            timer.start_case()
            for _ in range(BLOCK):
                _, sample = timer.timed(invokes[i], lambda x: x, inputs)
                times[i].append(sample.device_ms * 1e3)
    medians = {i: statistics.median(t) for i, t in times.items()}
    print(f"pid {os.getpid()} {case_name}: per-copy medians (us) "
          + " ".join(f"{medians[i]:.2f}" for i in range(copies)), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"mode-{os.getpid()}.json").write_text(json.dumps({"case": case_name, "us": times}))


def _call(task, entry, launch, args):
    """The contract's call with the submission's module-level launcher table pointing at one
    copy: the entry looks its launcher up by layout, so put this copy there first."""
    table = entry.__globals__["_LAUNCHERS"]
    key = next(iter(table))
    table[key] = launch
    return tuple(task.contract.call(entry, args))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "kv8_q32_d64_b256",
         int(sys.argv[3]) if len(sys.argv) > 3 else 8, int(sys.argv[4]) if len(sys.argv) > 4 else 6)
