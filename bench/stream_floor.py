"""How fast this GPU can stream N MB in one kernel, timed the way kbench times a call.

    python bench/stream_floor.py [--sizes 8,22,38,75,111,235,1024] [--calls 30]

A roofline built from one large copy's bandwidth (3.0 TB/s on the H100) says a 22 MB weight read
takes 7.3 us. Under kbench's protocol (gate, L2 flushed, CUDA events around one call) no kernel
gets there: each one pays a fixed part (its launch after the start event, the memory system's
ramp, its tail) besides the bytes. This script measures that floor per size, so a projection's
time can be judged against what one kernel of its size can do:
- copy: torch's copy_ of N MB into another N MB (moved bytes = 2N);
- read: a Triton kernel that reads N MB once and writes one float per program, in the best of
  two layouts (each program a contiguous chunk; programs striding over the buffer) and a few
  program counts. Its figure is the floor for a kernel that must read N MB, such as a
  projection streaming its weights.
Each figure is the median of --calls calls through kbench.call_timer.CallTimer. CUDA only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from call_median import median_ms  # noqa: E402  (bench/ is the script's folder)

MB = 2**20
# (programs per SM, elements a step, warps, stages) tried for each layout
SHAPES = ((2, 4096, 8, 4), (4, 4096, 8, 3), (8, 2048, 4, 3), (16, 2048, 4, 3))


@triton.jit
def _read_chunks(a, out, n, per_program, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    start = pid.to(tl.int64) * per_program
    for off in range(0, per_program, BLOCK):
        offs = start + off + tl.arange(0, BLOCK)
        acc += tl.load(a + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def _read_strided(a, out, n, PROGRAMS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for off in range(pid.to(tl.int64) * BLOCK, n, PROGRAMS * BLOCK):
        offs = off + tl.arange(0, BLOCK)
        acc += tl.load(a + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,22,38,75,111,235,1024", help="MB, comma-separated")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("stream_floor: needs a CUDA GPU", file=sys.stderr)
        return 2
    from kbench.call_timer import CallTimer
    from kbench.timing import flush_bytes

    timer = CallTimer("cuda", flush_bytes("cuda"))
    props = torch.cuda.get_device_properties(0)
    n_sms = props.multi_processor_count
    out = torch.empty(16 * n_sms, device="cuda")

    def median_us(fn, inputs) -> float:
        return median_ms(timer, fn, inputs, args.calls) * 1e3

    print(f"{props.name}, {n_sms} SMs; median of {args.calls} calls each (kbench CallTimer)")
    print(f"{'MB':>6} {'copy us':>9} {'copy TB/s':>10} {'read us':>9} {'read TB/s':>10}  best read layout")
    for size in (int(s) for s in args.sizes.split(",")):
        n = size * MB // 2
        inputs = {"a": torch.randn(n, device="cuda").bfloat16(), "b": torch.empty(n, device="cuda", dtype=torch.bfloat16)}
        copy = median_us(lambda d: (d["b"].copy_(d["a"]),), inputs)
        best = (float("inf"), "")
        for per_sm, block, warps, stages in SHAPES:
            programs = per_sm * n_sms
            per_program = triton.cdiv(triton.cdiv(n, programs), block) * block
            chunks = lambda d: (_read_chunks[(programs,)](d["a"], out, n, per_program, BLOCK=block,  # noqa: E731
                                                          num_warps=warps, num_stages=stages), out)[1:]
            strided = lambda d: (_read_strided[(programs,)](d["a"], out, n, PROGRAMS=programs, BLOCK=block,  # noqa: E731
                                                            num_warps=warps, num_stages=stages), out)[1:]
            for name, fn in (("chunks", chunks), ("strided", strided)):
                us = median_us(fn, {"a": inputs["a"]})
                best = min(best, (us, f"{name}, {per_sm} programs an SM"))
        print(f"{size:6d} {copy:9.1f} {2 * size * MB / copy / 1e6:10.2f} {best[0]:9.1f} {size * MB / best[0] / 1e6:10.2f}  {best[1]}",
              flush=True)
        del inputs
    return 0


if __name__ == "__main__":
    sys.exit(main())
