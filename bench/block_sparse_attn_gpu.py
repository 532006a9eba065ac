"""GPU check and benchmark of the bundled block_sparse_attn kernel against FlexAttention.

    python bench/block_sparse_attn_gpu.py --suites quick,full --out $OUT [--sweep]

For every case: correctness of the kernel and of the FlexAttention baseline against the
ground truth; then
  * the original's per-call protocol: one warm-up on the canonical case per shape key,
    3 fresh inputs (seed = sha256(f"{seed}:measure:{i}")), host clock around the call and a
    synchronize, median -> the native score (family geomean of family medians);
  * CUDA events with an L2 flush between calls, median of N calls on one input set.
Both go through reference/block_sparse_attn/contract.py (load, setup, call, after_run),
so the compile-cache stability check runs too. Writes a table and JSON under --out.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kbench.loader import load_module  # noqa: E402

try:
    import tomllib  # noqa: E402
except ImportError:  # pragma: no cover
    import tomli as tomllib  # type: ignore

REF = ROOT / "reference" / "block_sparse_attn"
task = load_module(REF / "task.py", "_kbench_task_block_sparse_attn")
contract = load_module(REF / "contract.py", "_kbench_contract_block_sparse_attn")
spec_mod = task.spec_mod
ARGS = ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")


def cases_of(suite):
    data = tomllib.loads((ROOT / "cases" / "block_sparse_attn.toml").read_text())
    return data["suites"][suite]["cases"]


def host_timed(entry, inputs, wake=None):
    """Host clock around call + synchronize (the original's timer); also CUDA events and the
    time the call takes to return, to tell host overhead from GPU time. ``wake``: run a
    ~2 ms GPU job first (diagnostic: is the GPU clocked down after host-side generation?)."""
    if wake is not None:
        for _ in range(8):
            torch.mm(wake, wake)
    torch.cuda.synchronize()
    tiny = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    tiny.add_(1)  # diagnostic: how long does any launch + sync take right now?
    torch.cuda.synchronize()
    host_timed.noop_ms = (time.perf_counter() - t) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    out = contract.call(entry, inputs)
    t1 = time.perf_counter()
    end.record()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t2 - t0) * 1e3, out, start.elapsed_time(end), (t1 - t0) * 1e3


def event_timed(entry, inputs, reps, flush):
    samples = []
    for _ in range(reps):
        flush.fill_(float("nan"))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        contract.call(entry, inputs)
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples), samples


def native_protocol(entry, case, log):
    """The original's protocol for one case: 3 fresh measure inputs, host clock, median;
    every output checked (the original checked one)."""
    lat, diag, worst = [], [], None
    wake = torch.randn(4096, 4096, device="cuda")
    for i in range(3):
        fresh = dict(case, seed=spec_mod.derived_seed(case["seed"], f"measure:{i}"))
        inputs = task.generate(fresh, "cuda")
        ms, out, ev, ret = host_timed(entry, inputs)
        noop = host_timed.noop_ms
        ms_w, out_w, ev_w, _ = host_timed(entry, inputs, wake)
        lat.append(ms)
        diag.append((ev, ret, ms_w, ev_w, noop))
        for o in (out, out_w):
            verdict = task.check(o, task.reference(inputs), inputs)
            if not verdict.passed:
                worst = verdict.reason
        del inputs, out, out_w
    return statistics.median(lat), lat, worst, [statistics.median(c) for c in zip(*diag)]


def run_target(path, suites, reps, flush, log):
    entry = contract.load(path)
    records = {}
    try:
        all_cases = [c for s in suites for c in cases_of(s)]
        t0 = time.perf_counter()
        contract.setup(entry, all_cases, "cuda")
        log(f"  setup+warm-up {time.perf_counter() - t0:.1f} s")
        for case in all_cases:
            inputs = task.generate(case, "cuda")
            out = contract.call(entry, inputs)
            torch.cuda.synchronize()
            verdict = task.check(out, task.reference(inputs), inputs)
            ev_ms, _ = event_timed(entry, inputs, reps, flush)
            nat_ms, nat_all, bad, (nat_ev, nat_ret, warm_ms, warm_ev, noop) = native_protocol(entry, case, log)
            rf = task.roofline(case)
            records[case["name"]] = {
                "status": "passed" if verdict.passed and not bad else "mismatch",
                "reason": verdict.reason or bad or "", "max_abs_err": verdict.max_abs_err,
                "event_ms": ev_ms, "native_ms": nat_ms, "native_samples_ms": nat_all,
                "native_event_ms": nat_ev, "native_return_ms": nat_ret,
                "native_woken_ms": warm_ms, "native_woken_event_ms": warm_ev, "native_noop_ms": noop,
                "tflops": rf["flops"] / ev_ms / 1e9, "gbps": rf["bytes"] / ev_ms / 1e6,
                "params": case}
            r = records[case["name"]]
            log(f"  {case['name']:<18} {r['status']:<8} ev {ev_ms:6.3f} nat {nat_ms:6.3f} "
                f"(ev {nat_ev:6.3f} ret {nat_ret:6.3f} noop {noop:5.3f}; woken {warm_ms:6.3f} ev {warm_ev:6.3f}) "
                f"{r['tflops']:5.0f} TF/s {r['reason'][:150]}")
            del inputs, out
        try:
            contract.after_run(entry)
            cache = "unchanged"
        except Exception as exc:  # noqa: BLE001
            cache = str(exc)
        log(f"  compile cache after timing: {cache}")
    finally:
        contract.unload(entry)
    return records, cache


def score(records, key, suite):
    rows = [dict(r, latency_ms=r[key], name=n) for n, r in records.items()
            if n.startswith(suite + "-")]
    return task.native_score(rows, suite)


def sweep(log, reps, flush):
    sub = load_module(ROOT / "submissions" / "block_sparse_attn" / "submission.py", "_bsa_sweep")
    configs = [(128, 128, 8, 3), (128, 64, 8, 4), (64, 64, 4, 3), (64, 128, 4, 3), (64, 64, 4, 4),
               (64, 128, 8, 2)]
    names = ["quick-global-1", "full-window-3", "full-retrieval-2"]
    cases = [c for c in cases_of("quick") + cases_of("full") if c["name"] in names]
    inputs = [task.generate(c, "cuda") for c in cases]
    expected = [task.reference(inp) for inp in inputs]
    results = {}
    for cfg in configs:
        sub.CONFIGS = {"default": cfg}
        row = []
        try:
            bad = []
            for inp, exp, name in zip(inputs, expected, names):
                verdict = task.check(sub.block_sparse_attn_fwd(*[inp[a] for a in ARGS]), exp, inp)
                torch.cuda.synchronize()
                if not verdict.passed:
                    bad.append(f"{name}: {verdict.reason[:100]}")
                entry = contract.Entry(sub.block_sparse_attn_fwd, None, (), ROOT, True, None)
                row.append(event_timed(entry, inp, reps, flush)[0])
            results[str(cfg)] = row
            log(f"  sweep {cfg}: " + "  ".join(f"{n} {ms:.3f} ms" for n, ms in zip(names, row))
                + (f"  FAILED {bad}" if bad else "  ok"))
        except Exception as exc:  # noqa: BLE001
            log(f"  sweep {cfg}: failed {str(exc)[:200]}")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suites", default="quick,full")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--no-flex", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    suites = args.suites.split(",")
    props = torch.cuda.get_device_properties(0)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    log(f"device {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, "
        f"triton {__import__('triton').__version__}, commit {commit or '?'}")
    flush = torch.empty(2 * 64 * 2**20 // 4, device="cuda")  # 128 MiB > 2x the 50 MiB L2
    result = {"device": props.name, "torch": torch.__version__, "commit": commit}
    if args.sweep:
        result["sweep"] = sweep(log, args.reps, flush)
    targets = {"triton": ROOT / "submissions" / "block_sparse_attn" / "submission.py"}
    if not args.no_flex:
        targets["flex"] = REF / "baseline_flex.py"
    for name, path in targets.items():
        log(f"{name}:")
        records, cache = run_target(path, suites, args.reps, flush, log)
        result[name] = {"records": records, "cache": cache,
                        "scores": {s: {"native": score(records, "native_ms", s),
                                       "events": score(records, "event_ms", s)} for s in suites}}
    log("")
    log(f"{'suite':<6} {'target':<7} {'native geomean ms':>18} {'worst family':>13} {'events geomean ms':>18}")
    for s in suites:
        for name in targets:
            sc = result[name]["scores"][s]
            nat, ev = sc["native"], sc["events"]
            log(f"{s:<6} {name:<7} {nat['value'] or float('nan'):18.3f} "
                f"{nat.get('worst_family_latency_ms', float('nan')):13.3f} {ev['value'] or float('nan'):18.3f}")
        if "flex" in targets:
            a = result["triton"]["scores"][s]["native"]["value"]
            b = result["flex"]["scores"][s]["native"]["value"]
            if a and b:
                log(f"{s:<6} speedup vs flex (native geomean): {b / a:.2f}x")
    (out / "block_sparse_attn_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "block_sparse_attn_gpu.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
