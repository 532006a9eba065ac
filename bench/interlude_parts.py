"""Which work between the primer and the call takes away what a kernel's own previous call left?
One case, through kbench's CallTimer in one plain process, with single kernels in place of the
interlude.

    python3 bench/interlude_parts.py TASK CASE [--calls 40] [--reps 2] [--only submission]
    (after `source bench/gpu_env.sh`; a GPU is needed)

For the bundled submission and the task's first baseline, medians of `--calls` calls on 6 input
sets made ahead (cycled), with between primer and gate one of:
- nothing (kbench's protocol before the interlude), or kbench's interlude (today's);
- torch's sum over 256 KB or 64 MB, a layer norm, a GELU and a cuBLAS matmul at the interlude's
  shapes (256 tokens, hidden 2048);
- a Triton elementwise add (no shared memory), and one Triton dot kernel compiled at several
  tile depths, so that only its shared memory differs (the size Triton reports is printed);
- the add and the largest dot on 4 programs (SMs) instead of all, and the 256 KB sum followed by
  either on all SMs: does the state follow which SMs ran last, or their shared-memory setup?
- a Triton kernel on 4 programs whose code alone is large (unrolled arithmetic, no shared memory):
  is it the code the kernel between brings in? Each Triton row names its cubin's size.
The ratio to the first "nothing" is what the state is worth to the kernel; `--reps` repeats the
whole list, in order, to show the drift between rounds. docs/measurement.md, "What a call's own
previous call leaves", has the figures and what they say about the interlude's size.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from crosscheck import bundled_and_baseline  # noqa: E402  (bench/ is the script's folder)
from interference_probe import between_row  # noqa: E402
from kbench.runner import Options, Runner  # noqa: E402

TOKENS, HIDDEN, K = 256, 2048, 1024
DOT_TILES = ((16, 1), (32, 2), (64, 3), (64, 4), (128, 3))   # (BK, stages): 8-192 KB of shared memory
LONG_CODE_STEPS = (64, 768)   # unrolled steps: a few KB of code, and some tens (4096 takes minutes to compile)


@triton.jit
def _dot(a, b, c, K: tl.constexpr, BK: tl.constexpr):
    """One 128x128 tile of a (128 x K) @ (K x 128) product per program; BK and num_stages set
    its shared memory."""
    om = tl.arange(0, 128)
    on = tl.arange(0, 128)
    ok = tl.arange(0, BK)
    acc = tl.zeros((128, 128), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + om[:, None] * K + (k + ok)[None, :])
        y = tl.load(b + (k + ok)[:, None] * 128 + on[None, :])
        acc += tl.dot(x, y)
    tl.store(c + tl.program_id(0) * 16384 + om[:, None] * 128 + on[None, :], acc.to(tl.bfloat16))


@triton.jit
def _add_one(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)


@triton.jit
def _long_code(x, STEPS: tl.constexpr):
    """No shared memory, one tile, and STEPS unrolled steps of arithmetic: only its code is large."""
    o = tl.arange(0, 128)
    v = tl.load(x + o)
    for i in tl.static_range(STEPS):
        v = tl.where(v > i * 0.01, v * 0.999 + 0.5, v * 1.001 - 0.25)
    tl.store(x + o, v)


def works() -> dict:
    """name -> the work put between primer and gate (kbench's interlude is the timer's own)."""
    dev, bf16 = "cuda", torch.bfloat16
    x = torch.randn(TOKENS, HIDDEN, device=dev, dtype=bf16)
    w = torch.randn(HIDDEN, HIDDEN, device=dev, dtype=bf16)
    small, big = torch.randn(1 << 16, device=dev), torch.randn(16 << 20, device=dev)
    flat = torch.randn(1 << 20, device=dev)
    flat_out = torch.empty_like(flat)
    a = torch.randn(128, K, device=dev, dtype=bf16)
    b = torch.randn(K, 128, device=dev, dtype=bf16)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    c = torch.empty(sms * 16384, device=dev, dtype=bf16)
    out = {"nothing": lambda: None, "kbench's interlude": None,
           "sum of 256 KB": small.sum, "sum of 64 MB": big.sum,
           f"layer norm {TOKENS}x{HIDDEN}": lambda: F.layer_norm(x, x.shape[-1:]),
           f"GELU {TOKENS}x{HIDDEN}": lambda: F.gelu(x),
           f"matmul {TOKENS}x{HIDDEN}x{HIDDEN}": lambda: x @ w,
           "Triton add, no shared memory": lambda: _add_one[(256,)](flat, flat_out, flat.numel(), B=4096)}
    for bk, stages in DOT_TILES:
        compiled = _dot[(sms,)](a, b, c, K=K, BK=bk, num_stages=stages)
        name = f"Triton dot, {compiled.metadata.shared // 1024} KB shared, {len(compiled.asm['cubin']) // 1024} KB cubin"
        out[name] = lambda bk=bk, stages=stages: _dot[(sms,)](a, b, c, K=K, BK=bk, num_stages=stages)
    # On 4 SMs rather than all of them, and after the small sum: is it which SMs ran last, or what
    # their shared memory was set up for?
    big_dot = DOT_TILES[-1]
    out["Triton add, 4 programs"] = lambda: _add_one[(4,)](flat, flat_out, 4 * 4096, B=4096)
    out["Triton dot, largest, 4 programs"] = lambda: _dot[(4,)](a, b, c, K=K, BK=big_dot[0], num_stages=big_dot[1])
    out["sum of 256 KB, then Triton add"] = lambda: (small.sum(), out["Triton add, no shared memory"]())
    for steps in LONG_CODE_STEPS:
        compiled = _long_code[(4,)](flat, STEPS=steps)
        out[f"Triton {len(compiled.asm['cubin']) // 1024} KB cubin, 4 programs, no shared"] = \
            lambda steps=steps: _long_code[(4,)](flat, STEPS=steps)
    out["sum of 256 KB, then Triton dot, largest"] = lambda: (small.sum(), _dot[(sms,)](
        a, b, c, K=K, BK=big_dot[0], num_stages=big_dot[1]))
    torch.cuda.synchronize()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task")
    ap.add_argument("case")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only", choices=("submission", "baseline"), default=None)
    args = ap.parse_args()
    task, targets, cases = bundled_and_baseline(args.task, "quick", args.case)
    if not cases:
        raise SystemExit(f"no case {args.case!r} in {args.task}'s quick suite")
    case = cases[0]
    if args.only:
        targets = [t for t in targets if t.label.startswith(args.only)]
    runner = Runner(task, Options(device="cuda"))
    sets = [runner._make(case, 100 + i)[0] for i in range(6)]
    between = works()
    print(f"{case.name}: us, median [95% CI] of {args.calls} calls, ratio to the first 'nothing'", flush=True)
    for t in targets:
        base = None
        for _ in range(args.reps):
            for name, work in between.items():
                base = between_row(t, name, work or (lambda: None), task, case, sets, args.calls,
                                   interlude=work is None, base=base)
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
