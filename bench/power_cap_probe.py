"""Does kbench see a throttled card? One case timed on a card at rest, then while another process
holds it at its power cap, then at rest again.

    python3 bench/power_cap_probe.py [--task qknorm] [--suite quick] [--case kv8_q32_d128_b1]
    (after `source bench/gpu_env.sh`; a GPU is needed)

The load is a loop of 8192^3 bf16 matmuls in a second process (its own CUDA context), started
a few seconds before the run so the power controller has settled. Per run: the case's latency,
the SM clock kbench read from the gate before each call (median, submission and baseline), and
the case's notes, where kbench/detectors.py's throttle note should appear under load and not
at rest. The times under load are not the card's: the load also takes SMs; what this checks is
the clock reading and the note. Figures: docs/measurement.md, "Clocks".
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.runner import Options, evaluate  # noqa: E402
from kbench.timing import StopRule  # noqa: E402
from kbench.tasks import get_task  # noqa: E402

LOAD = """
import torch, sys
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize(); print("load running", flush=True)
while True:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def one_run(task, submission: Path, suite: str, case: str) -> str:
    options = Options(suite=suite, device="cuda", only=(case,), stop=StopRule(budget_s=1.0))
    rec = evaluate(task, submission, options)["cases"][0]
    notes = [n for n in rec["notes"] if "throttled" in n] or ["no throttle note"]
    return (f"{rec['status']}, latency {rec['latency_ms'] * 1e3:.2f} us, SM clock "
            f"{rec['sm_clock_mhz']} MHz (baseline {rec.get('baseline_sm_clock_mhz')}); " + "; ".join(notes))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="qknorm")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--case", default="kv8_q32_d128_b1")
    ap.add_argument("--settle-s", type=float, default=5.0, help="load time before the run")
    args = ap.parse_args()
    task = get_task(args.task)
    submission = ROOT / "submissions" / args.task
    print("at rest:     ", one_run(task, submission, args.suite, args.case), flush=True)
    load = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True)
    try:
        load.stdout.readline()
        time.sleep(args.settle_s)
        print("under load:  ", one_run(task, submission, args.suite, args.case), flush=True)
    finally:
        load.kill()
        load.wait()
    time.sleep(args.settle_s)
    print("at rest again:", one_run(task, submission, args.suite, args.case), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
