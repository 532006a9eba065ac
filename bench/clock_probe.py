"""Diagnostic: does a short kernel's time follow the SM clock, and the clock the idle time
before the call?

kbench's workers call a kernel every few milliseconds with the device idle in between (the
parent checks outputs, the other target runs); a plain loop keeps it busy. This times the
bundled qknorm kernel through kbench's CallTimer with a random idle gap before each call (the
gaps drawn per call, so time and gap are not confounded) and reads the SM clock during the
call's gate: the gate spins a known number of clock cycles, so cycles / its event time is the
clock just before the call.

    python bench/clock_probe.py OUT_DIR [CASE] [CALLS]    (writes OUT_DIR/clock-<pid>.json)
"""
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.call_timer import CallTimer  # noqa: E402
from kbench.runner import Options, Runner  # noqa: E402
from kbench.tasks import get_task, submission_file  # noqa: E402
from kbench.timing import flush_bytes  # noqa: E402

GAPS_MS = (0.0, 2.0, 10.0, 50.0)


def main(out_dir: Path, case_name: str, calls: int) -> None:
    task = get_task("qknorm")
    case = next(c for c in task.suite("full").cases if c.name == case_name)
    entry = task.contract.load(submission_file(task, ROOT / "submissions/qknorm"))
    inputs = Runner(task, Options(device="cuda"))._make(case, 0)[0]
    timer = CallTimer("cuda", flush_bytes("cuda"))
    spun = []
    spin = timer.spin

    def timed_spin(cycles):
        before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before.record()
        spin(cycles)
        after.record()
        spun.append((cycles, before, after))
    timer.spin = timed_spin
    invoke = lambda args: tuple(task.contract.call(entry, args))  # noqa: E731
    for _ in range(20):
        timer.timed(invoke, lambda x: x, inputs)
    rows = []
    for _ in range(calls):
        gap = random.choice(GAPS_MS)
        time.sleep(gap / 1e3)
        spun.clear()
        _, sample = timer.timed(invoke, lambda x: x, inputs)
        cycles, before, after = spun[-1]
        mhz = cycles / before.elapsed_time(after) / 1e3
        rows.append({"gap_ms": gap, "us": sample.device_ms * 1e3, "mhz": mhz, "gate_ms": sample.gate_ms})
    for gap in GAPS_MS:
        sel = [r for r in rows if r["gap_ms"] == gap]
        print(f"pid {os.getpid()} {case_name} gap {gap:4.0f} ms: {len(sel)} calls, median "
              f"{statistics.median(r['us'] for r in sel):.2f} us, clock "
              f"{statistics.median(r['mhz'] for r in sel):.0f} MHz "
              f"[{min(r['mhz'] for r in sel):.0f}, {max(r['mhz'] for r in sel):.0f}]", flush=True)
    xs, ys = [r["mhz"] for r in rows], [r["us"] for r in rows]
    print(f"pid {os.getpid()}: correlation(us, MHz) {statistics.correlation(xs, ys):+.2f}", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"clock-{os.getpid()}.json").write_text(json.dumps({"case": case_name, "rows": rows}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "kv8_q32_d64_b256",
         int(sys.argv[3]) if len(sys.argv) > 3 else 400)
