"""Probe: the settle gap of honest qknorm submissions, per call and per process, run after run
(the honest GPU test flagged torch_eager's kv32_q32_d128_b256 once: settle 0.2977 ms, device 0.0745)."""
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.run import runner as R  # noqa: E402
from kbench.run.runner import Options, Runner  # noqa: E402
from kbench.stats.estimates import StopRule  # noqa: E402
from kbench.tasks.task import get_task  # noqa: E402

orig = R.Runner._finish


def finish(self, case, worst, sub, base, series, *rest):
    s = series[id(sub)]
    gaps = [a - b for a, b in zip(s.settle, s.device)]
    line = [f"{case.name:<20} n {len(gaps):2d} dev {st.median(s.device)*1e3:6.1f} settle {st.median(s.settle)*1e3:6.1f} "
            f"floor {st.median(s.floor)*1e3:5.1f} host {st.median(s.host)*1e3:6.1f} gate {st.median(s.gate)*1e3:6.1f} "
            f"held {s.held} misses {s.misses}"]
    for p in sorted(set(s.process)):
        g = sorted(round(x * 1e3) for x, q in zip(gaps, s.process) if q == p)
        d = sorted(round(x * 1e3, 1) for x, q in zip(s.drain, s.process) if q == p)
        line.append(f"   p{p} settle-device us {g}\n   p{p} drain us {d}")
    print("\n".join(line), flush=True)
    return orig(self, case, worst, sub, base, series, *rest)


R.Runner._finish = finish
names = sys.argv[1].split(",")
rounds = int(sys.argv[2])
task = get_task("qknorm")
for i in range(rounds):
    load = Path("/proc/loadavg").read_text().split()[:3]
    procs = subprocess.run("ps -eo comm | sort | uniq -c | sort -rn | head -4", shell=True, capture_output=True,
                           text=True).stdout.split()
    for name in names:
        print(f"== round {i} {name} load {load} procs {procs}", flush=True)
        t0 = time.time()
        res = Runner(task, Options(suite="quick", only=("kv8_q32_d64_b256", "kv8_q32_d128_b1", "kv32_q32_d128_b256"),
                                   device="cuda", baseline="none", timeout=120.0, calibrate=True, warmup_ms=5.0, pool=2,
                                   stop=StopRule(noise=0.02, min_samples=10, max_samples=30, budget_s=0.5))).run(
            ROOT / "tests/fixtures" / ("hostile/qknorm/" + name[8:] if name.startswith("hostile:") else "honest/qknorm/" + name))
        flags = [(c["case"], c["flags"]) for c in res["cases"] if c["flags"]]
        print(f"   {time.time() - t0:.1f}s flags {flags}", flush=True)
