"""kbench's timing protocol in one plain process, beside triton's do_bench: does isolation move
the number?

    python bench/crosscheck.py qknorm --suite quick [--against kbench.json] [--out DIR]
    python bench/crosscheck.py block_sparse_attn --cases quick-window-1 --only baseline

For every case: the inputs and ground truth kbench's runner makes for every timed call (the
case's seed first, then a fresh seed per call from a per-run nonce, the task's generate_timed
where it has one: `make_inputs` below mirrors the runner's own), the baseline and the
submission alternating call by call, each call timed by kbench.worker.timer.CallTimer (the
worker's own code: gate, inputs written after it, L2 flush, placement shifts, events) and its
outputs checked, the same stop rule; no worker, no IPC. One do_bench figure per target beside it.
Before the first case another process makes a CUDA context on the GPU and exits (--alone: not):
on one H200 a process whose context had seen no other made after it read qknorm's flashinfer
baseline 3-3.6% slower than once one had come and gone, for the rest of its life; a kbench run
has one made after its workers' own (kbench/run/workers.py, the same call used here)
(docs/measurement.md, "Another CUDA context after the workers' own").
With --against (a `kbench eval --json` result of the same suite) it prints, per case and
target, whether kbench's median is within 2% or 0.15 us of this one (the check
bench/gpu_acceptance.py makes) and exits 1 if any is not.
"""
from __future__ import annotations

import argparse
import json
import math
import secrets
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench import protocol
from kbench.run import workers
from kbench.run.card import flush_bytes
from kbench.stats.estimates import StopRule, process_floor, summarize
from kbench.tasks.interface import TASK
from kbench.tasks.suites import derive_seed
from kbench.tasks.task import get_task, submission_file
from kbench.worker.timer import CallTimer

AGREE_REL, AGREE_ABS_MS = 0.02, 0.15e-3


class Plain:
    """A submission or baseline loaded in this process through the task's own contract."""

    def __init__(self, label, task, path):
        self.label = label
        self.contract = task.contract
        self.entry = self.contract.load(path)
        self.prepare = getattr(self.contract, "prepare", lambda inputs: inputs)
        self.timer = CallTimer("cuda", flush_bytes("cuda"))
        self.samples: list[float] = []

    def invoke(self, args):
        return tuple(self.contract.call(self.entry, args))


def set_up(task, targets, cases) -> None:
    """The contract's setup (compilation ahead of the cases), as a worker runs it at load."""
    setup = getattr(task.contract, "setup", None)
    if setup is not None:
        for t in targets:
            setup(t.entry, [dict(c.params, seed=c.seed) for c in cases], "cuda")


def another_context_comes_and_goes() -> None:
    """Another process makes a CUDA context on this GPU and exits, as a kbench run has one made
    after its workers' own before their timed calls (kbench/run/workers.py): without it this
    process's context would be the GPU's last made, and read a few percent slow."""
    workers.make_and_exit(torch.cuda.current_device())


def do_bench_ms(target: Plain, inputs: dict) -> float:
    import triton.testing

    args = target.prepare(inputs)
    return float(triton.testing.do_bench(lambda: target.invoke(args), warmup=25, rep=100,
                                         return_mode="median"))


def make_inputs(task, case, index: int, nonce: int, device: str = "cuda") -> tuple[dict, tuple]:
    """(inputs, ground truth) of call ``index`` of a case as kbench's runner makes them
    (kbench/run/runner.py): call 0 on the case's seed; timed calls on a fresh seed each,
    derive_seed(case seed, the run's nonce, "timed", index), through the task's generate_timed
    (made on the device) where it has one, else its generate."""
    module = task.module
    first = dict(case.params, seed=case.seed)
    timed = TASK.get(module, "generate_timed") if index else None
    if timed is not None:
        inputs = timed(first, device, derive_seed(case.seed, nonce, "timed", index))
    elif index:
        inputs = module.generate(dict(first, seed=derive_seed(case.seed, nonce, "timed", index)), device)
    else:
        inputs = module.generate(first, device)
    return inputs, tuple(module.reference(inputs))


def run_case(task, case, targets, stop: StopRule) -> dict:
    nonce = secrets.randbits(62)   # as the runner draws one per run: timed inputs nobody can compute ahead
    first = make_inputs(task, case, 0, nonce)[0]
    for t in targets:  # warm-up: compilation, autotuning, module builds
        for _ in range(3):
            t.timer.timed(t.invoke, t.prepare, first)
        t.samples = []
    start = time.perf_counter()
    index = 1
    live = list(targets)   # still being timed: the runner's stop rule, targets together
    while True:
        inputs, expected = make_inputs(task, case, index, nonce)
        order = targets if index % 2 else targets[::-1]
        for t in order:
            if t not in live:
                continue
            outputs, sample = t.timer.timed(t.invoke, t.prepare, inputs)
            check = task.module.check(protocol.resolve(outputs, inputs), expected, inputs)
            if not check.passed and t.label == "submission":
                raise SystemExit(f"{case.name}: {t.label} failed: {check.reason}")
            t.samples.append(sample.device_ms)
        del inputs, expected
        index += 1
        elapsed = time.perf_counter() - start
        verdicts = stop.verdicts([t.samples for t in live], elapsed)
        live = [t for t, why in zip(live, verdicts) if not why]
        if not live:
            break
    out = {"case": case.name}
    for t in targets:
        s = summarize(t.samples)
        out[t.label] = {"median_ms": s.median, "ci95_ms": [s.ci_low, s.ci_high], "n": s.n,
                        "noise": s.noise, "do_bench_ms": do_bench_ms(t, first),
                        "gate_ms": t.timer.gate_ms, "gate_off": t.timer.gate_off,
                        "clock_mhz": round(t.timer.cycles_per_ms / 1e3)}
    return out


def agreement(rows: list[dict], result: dict) -> list[tuple]:
    """Per case and target: (case, label, kbench ms, plain ms, do_bench ms, within 2% or
    0.15 us, within the difference's 95% interval, host-timed). The interval: kbench's (its
    processes' spread included) and this process's own, plus the between-process spread one
    process cannot show (kbench.stats.estimates.process_floor). Host-timed: the plain process could not
    hold the calls behind its gate (they synchronize, or outlast it), so both figures carry the
    host's speed, which differs from process to process."""
    by_case = {c["case"]: c for c in result["cases"]}
    lines = []
    for row in rows:
        rec = by_case.get(row["case"])
        for label, prefix in (("submission", ""), ("baseline", "baseline_")):
            field = "latency_ms" if label == "submission" else "baseline_latency_ms"
            if label not in row or rec is None or rec.get(field) is None:
                continue
            plain, iso = row[label]["median_ms"], rec[field]
            ok = abs(iso - plain) <= max(AGREE_REL * plain, AGREE_ABS_MS)
            se = math.sqrt((rec.get(f"{prefix}noise") or 0.0) ** 2 + row[label]["noise"] ** 2
                           + process_floor(plain) ** 2)
            consistent = abs(math.log(iso / plain)) <= 1.96 * se
            lines.append((row["case"], label, iso, plain, row[label]["do_bench_ms"], ok, consistent,
                          bool(row[label].get("gate_off"))))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--submission", default=None, help="default: submissions/<task>")
    ap.add_argument("--against", type=Path, help="a kbench eval --json result of the same suite")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--budget", type=float, default=StopRule().budget_s)
    ap.add_argument("--noise", type=float, default=StopRule().noise,
                    help="the stop rule's noise target (relative standard error of the median)")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    ap.add_argument("--only", choices=("baseline", "submission"), default=None,
                    help="time one target alone (a process of its own, as in kbench)")
    ap.add_argument("--no-gate", action="store_true",
                    help="diagnostic: no gate, the flush alone covers the host (the old protocol)")
    ap.add_argument("--alone", action="store_true",
                    help="diagnostic: no other CUDA context made after this process's own")
    ap.add_argument("--no-interlude", action="store_true",
                    help="diagnostic: no model work between primer and gate (the protocol before 0baeb4f)")
    args = ap.parse_args()

    task = get_task(args.task)
    sub_path = submission_file(task, Path(args.submission or ROOT / "submissions" / args.task))
    baseline = task.default_baseline("cuda")
    targets = [Plain("submission", task, sub_path)]
    if baseline is not None:
        targets.insert(0, Plain("baseline", task, task.baselines("cuda")[baseline]))
    if args.only:
        targets = [t for t in targets if t.label == args.only]
    for t in targets:
        t.timer.gate_off = args.no_gate
        if args.no_interlude:
            t.timer.interlude = None
    cases = task.suite(args.suite).cases
    if args.cases:
        cases = [c for c in cases if c.name in args.cases.split(",")]
    set_up(task, targets, cases)
    if not args.alone:
        another_context_comes_and_goes()
    stop = StopRule(budget_s=args.budget, noise=args.noise)
    rows = []
    for case in cases:
        row = run_case(task, case, targets, stop)
        rows.append(row)
        for t in targets:
            r = row[t.label]
            print(f"{case.name:32s} {t.label:10s} median {r['median_ms'] * 1e3:9.2f} us "
                  f"[{r['ci95_ms'][0] * 1e3:.2f}, {r['ci95_ms'][1] * 1e3:.2f}] n={r['n']:4d} "
                  f"do_bench {r['do_bench_ms'] * 1e3:9.2f} us gate {r['gate_ms']:.2f} ms", flush=True)
        torch.cuda.empty_cache()
    status = 0
    if args.against:
        print(f"\nkbench ({args.against.name}) against the plain process: within 2% or 0.15 us; "
              f"within the difference's 95% interval")
        for case, label, iso, plain, bench, ok, consistent, host_timed in agreement(
                rows, json.loads(args.against.read_text())):
            print(f"{case:32s} {label:10s} kbench {iso * 1e3:9.2f} us  plain {plain * 1e3:9.2f} us  "
                  f"do_bench {bench * 1e3:9.2f} us  {(iso / plain - 1) * 100:+6.2f}%  {'ok' if ok else 'DIFFERS'}"
                  f"  {'consistent' if consistent else 'INCONSISTENT'}{'  (host-timed)' if host_timed else ''}")
            status |= not ok
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"crosscheck-{args.task}-{args.suite}.json").write_text(json.dumps(rows, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
