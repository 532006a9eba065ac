"""Diagnostic: what in a call's placement moves qknorm's time? Records per call the device
time, the input/output addresses and the pads, for the bundled kernel and flashinfer.

    python bench/placement_probe.py OUT_DIR N_CALLS     (writes OUT_DIR/placement.json)

Each call goes through kbench.call_timer.CallTimer, with placement shifts on and off; the
pads are read by wrapping CallTimer._pad. docs/benchmarks.md's Harrell-Davis figures (windows
of 40-160 recorded calls) come from these records."""
import json, sys, time
from pathlib import Path
import torch
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.call_timer import CallTimer
from kbench.runner import Options, Runner
from kbench.tasks import get_task, submission_file
from kbench.timing import flush_bytes

task = get_task("qknorm")
out_dir = Path(sys.argv[1])
n_calls = int(sys.argv[2])
targets = {"submission": submission_file(task, ROOT / "submissions/qknorm"),
           "flashinfer": task.baselines("cuda")["flashinfer"]}
cases = {c.name: c for c in task.suite("quick").cases}
rows = []
for shift in (True, False):
    for label, path in targets.items():
        entry = task.contract.load(path)
        timer = CallTimer("cuda", flush_bytes("cuda"), shift=shift)
        pads = []
        orig_pad = timer._pad
        def rec_pad():
            p = orig_pad(); pads.append(p); return p
        timer._pad = rec_pad
        outs = []
        def invoke(args):
            o = tuple(task.contract.call(entry, args)); outs.append([t.data_ptr() for t in o]); return o
        for name in ("kv8_q32_d128_b1", "kv32_q32_d128_b256", "kv8_q32_d128_b64"):
            runner = Runner(task, Options(device="cuda"))
            inputs = runner._make(cases[name], 0)[0]
            for _ in range(20):
                timer.timed(invoke, lambda x: x, inputs)
            t0 = time.perf_counter()
            for i in range(n_calls):
                pads.clear(); outs.clear()
                live_ptr = []
                _, s = timer.timed(invoke, lambda x: (live_ptr.append(x["qkv"].data_ptr()), x)[1], inputs)
                rows.append({"shift": shift, "target": label, "case": name, "ms": s.device_ms,
                             "pads": list(pads), "qkv": live_ptr[-1], "outs": outs[-1], "gate": s.gate_ms,
                             "held": s.held})
            print(label, name, shift, "calls/s", n_calls / (time.perf_counter() - t0), flush=True)
out_dir.mkdir(parents=True, exist_ok=True)
(out_dir / "placement.json").write_text(json.dumps(rows))
