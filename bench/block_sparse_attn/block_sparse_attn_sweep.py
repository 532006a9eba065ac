"""block_sparse_attn: the bundled kernel under several launch configs, in one process (an
in-process bench, not kbench's two-process comparison).

    python bench/block_sparse_attn/block_sparse_attn_sweep.py [--suite full] [--rounds 25]
        [--configs "128,128,8,3;128,64,8,3"] [--submission DIR]

(on the GPU host, from the repository root, after `source bench/gpu_env.sh`.)

Per case of the suite: the timed-call inputs kbench makes (generate_timed, one fresh seed),
the task's ground truth; then ``--rounds`` rounds, each timing one call of every config in
turn by kbench's per-call protocol (kbench.worker.timer.CallTimer: L2 flush, device time of
the call behind the gate), so drift hits every config alike. Every timed output is checked
with the task's checker (``fails`` counts the calls that missed), and one more fresh seed
per (case, config) is checked untimed. Prints per case and config the median device time,
TFLOP/s (task.roofline flops) and the family geomean of family medians per config.
Configs are BLOCK_M,BLOCK_N,num_warps,num_stages[,NAME=value...]: the launch config, then
module constants of the submission to set for that config (e.g. PV_MODE=fp16,REVERSE=1);
the others keep their bundled values (GLUON=0 for the Triton kernel on Hopper, GLUON_STAGES=2;
the launch config applies to the Triton kernel only). For a change worth keeping, confirm it with
`kbench compare` of the bundled folder and a copy holding the change (two processes, a verdict).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]   # the repository
sys.path.insert(0, str(ROOT))
from kbench.tasks.task import get_task

DEFAULT_CONFIGS = ("128,128,8,3;128,128,8,2;128,128,8,4;128,64,8,2;128,64,8,3;128,64,8,4;"
                   "128,64,4,3;64,128,4,3;64,128,4,2;64,64,4,3;128,128,16,2")
ARGS = ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="full")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--submission", default=str(ROOT / "submissions" / "block_sparse_attn"))
    args = ap.parse_args()
    from kbench.run.card import flush_bytes
    from kbench.stats.estimates import summarize
    from kbench.tasks.interface import same_inputs
    from kbench.worker.timer import CallTimer

    configs = [tuple(c.split(",")) for c in args.configs.split(";")]
    timer = CallTimer("cuda", flush_bytes("cuda"))
    task = get_task("block_sparse_attn")
    m = task.module
    entry = task.contract.load(Path(args.submission))
    sub = sys.modules[entry.fn.__module__]
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"bundled CONFIGS={sub.CONFIGS}", flush=True)

    bundled = {name: getattr(sub, name) for name in ("PV_MODE", "DIAG_MODE", "REVERSE", "MAXNREG", "GLUON", "GLUON_STAGES") if hasattr(sub, name)}

    def use(cfg):
        sub.CONFIGS = {"default": tuple(int(x) for x in cfg[:4])}
        for name, value in bundled.items():
            setattr(sub, name, value)
        for item in cfg[4:]:   # NAME=value: a module constant of the submission (REVERSE=1, PV_MODE=fp16, MAXNREG=232)
            name, value = item.split("=")
            setattr(sub, name, int(value) if value.isdigit() else value)

    medians: dict[tuple, dict[str, float]] = {c: {} for c in configs}
    reported = set()
    families: dict[str, str] = {}
    for case in task.suite(args.suite).cases:
        params = dict(case.params, seed=case.seed)
        families[case.name] = params["family"]
        flops = m.roofline(params)["flops"]
        inputs = m.generate_timed(params, "cuda", 1009)
        expected = m.reference(inputs)
        extra = m.generate_timed(params, "cuda", 2003)
        extra_expected = m.reference(extra)
        fails = {c: 0 for c in configs}
        for cfg in list(configs):   # compile + untimed check on a second seed
            use(cfg)
            try:
                out = entry.fn(*(extra[k] for k in ARGS))
            except Exception as exc:  # noqa: BLE001 - a config that does not compile is dropped
                print(f"{','.join(cfg)}: dropped: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                configs.remove(cfg)
                del medians[cfg]
                continue
            fails[cfg] += not m.check(out, extra_expected, extra).passed
            if case is task.suite(args.suite).cases[0]:   # what the config compiled to
                for key, kernel in list(getattr(sub, "_COMPILED", {}).items()):
                    if key not in reported:
                        reported.add(key)
                        print(f"{','.join(cfg)}: {getattr(kernel, 'n_regs', '?')} registers, "
                              f"{getattr(kernel, 'n_spills', '?')} spilled, "
                              f"{kernel.metadata.shared if hasattr(kernel, 'metadata') else '?'} B shared", flush=True)
        samples = {c: [] for c in configs}
        for _ in range(args.rounds):
            for cfg in configs:
                use(cfg)
                out, sample = timer.timed(lambda a: task.contract.call(entry, a), same_inputs, inputs)
                fails[cfg] += not m.check(out, expected, inputs).passed
                samples[cfg].append(sample.device_ms)
                del out
        base = None
        for cfg in configs:
            s = summarize(samples[cfg][1:])
            medians[cfg][case.name] = s.median
            base = base or s.median
            print(f"{case.name:18s} {','.join(cfg):40s} {s.median * 1e3:8.1f} us  iqr {s.iqr * 1e3:6.1f}  "
                  f"{flops / s.median / 1e9:6.0f} TFLOP/s  x{base / s.median:5.3f}  fails {fails[cfg]}/{args.rounds + 1}",
                  flush=True)
        del inputs, expected, extra, extra_expected
        torch.cuda.empty_cache()

    print("\nconfig               family-geomean-of-medians ms  per family medians", flush=True)
    for cfg in configs:
        fam = {}
        for name, med in medians[cfg].items():
            fam.setdefault(families[name], []).append(med)
        meds = {f: statistics.median(v) for f, v in fam.items()}
        geo = math.exp(sum(math.log(v) for v in meds.values()) / len(meds))
        print(f"{','.join(cfg):40s} {geo:.4f}  " + "  ".join(f"{f} {v:.4f}" for f, v in meds.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
