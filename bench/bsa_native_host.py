"""block_sparse_attn under the original's native protocol: where the host-clock time goes.

    python3 bench/bsa_native_host.py [--other DIR] [--modes floor,alloc,...] [--sets N]
    (after `source bench/gpu_env.sh`; a GPU is needed)

Inputs generated on the host as the original makes them (seconds of CPU work per full-size
set), then per fresh input set one mode, rotating, timed with the host clock around the call
and a synchronize (plus CUDA events). Modes:
  floor      a 1-element add_ (what any launch pays in that state: the host's part)
  alloc      torch.empty_like(q) and torch.empty for lse only
  alloc1     o and lse as views of one allocation
  alloc_ee   both by torch.empty
  fast       the submission (its direct launch of the compiled kernel)
  jit        the submission with FAST_LAUNCH off (Triton's JIT dispatch)
  other      the submission in --other DIR, run as "fast"
  steps      the direct launcher's path as _launch_gluon takes it, a host-clock stamp after
             each step (allocations, checks, stream, pointers, arguments, grid, descriptors,
             the C launcher); per-step medians printed below the modes
  steps_int  the same with both outputs by torch.empty and the pointers handed to the C
             launcher as ints
Prints per case and mode the median return time (the host path), total and event span over
--sets input sets (default 4). Figures: docs/benchmarks-block_sparse_attn.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.tasks import get_task  # noqa: E402

MODES = ("floor", "alloc", "alloc1", "alloc_ee", "fast", "jit", "other", "steps", "steps_int")
STEPS = ("o", "lse", "3 x .contiguous()", "supported(q, k, v)", "raw_stream", "5 x data_ptr",
         "other_arguments", "grid(q)", "4 descriptors", "the C launcher")
CASES = ("quick-window-1", "full-window-1", "full-retrieval-3")
ARGS = ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")


def _two_allocations(q):
    return torch.empty_like(q), torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)


def _one_allocation(q):
    B, H, T, _ = q.shape
    buf = q.new_empty(q.numel() + 2 * B * H * T)
    o = buf.as_strided(q.shape, q.stride())
    return o, buf.view(torch.float32).as_strided((B, H, T), (H * T, T, 1), q.numel() // 2)


def _stepped_call(sub, a, ints: bool = False) -> list[float]:
    """The bundled submission's Gluon call, step by step as _launch_gluon takes it through the
    direct launcher (descriptors cached): the host clock after each step.
    ``ints``: o and lse both by torch.empty, and the launcher given the pointers as ints
    (read once), where it otherwise reads each tensor's data_ptr and asks the driver about it."""
    q, k, v, rp, ci, sl = a
    g = sub._gluon
    dev = q.device
    t = [time.perf_counter()]
    o = torch.empty(q.shape, dtype=q.dtype, device=dev) if ints else torch.empty_like(q)
    t.append(time.perf_counter())
    lse = (torch.empty(q.shape[:3], dtype=torch.float32, device=dev) if ints
           else q.new_empty(q.shape[:3], dtype=torch.float32))
    t.append(time.perf_counter())
    rp, ci, sl = rp.contiguous(), ci.contiguous(), sl.contiguous()
    t.append(time.perf_counter())
    ok = g.supported(q, k, v)
    t.append(time.perf_counter())
    stream = g.raw_stream(dev)
    t.append(time.perf_counter())
    ptrs = [x.data_ptr() for x in (o, lse, rp, ci, sl)]
    ok = ok and all(p % 16 == 0 for p in ptrs)
    t.append(time.perf_counter())
    rest = g.other_arguments(q, rp, ci, sl, o, lse, sub.QK_SCALE, sub.GLUON_STAGES, stream)
    if ints:
        rest = (*ptrs, g.tile_counter(dev, stream).data_ptr(), *rest[6:])
    t.append(time.perf_counter())
    grid = g.grid(q)
    t.append(time.perf_counter())
    direct = sub._DIRECT[("gluon", sub.GLUON_STAGES, dev, rp.dtype, ci.dtype, sl.dtype)]
    args = [*direct._map(q, direct.meta[0]), *direct._map(k, direct.meta[1]), *direct._map(v, direct.meta[2]),
            *direct._map(o, direct.meta[3]), *rest]
    t.append(time.perf_counter())
    direct.raw(grid[0], grid[1], 1, stream, *direct.base, *args[:direct.n_args + 4 * direct.N_DESCRIPTORS])
    t.append(time.perf_counter())
    if not ok:
        raise RuntimeError("the Gluon kernel does not take these inputs")
    return [(b - a_) * 1e3 for a_, b in zip(t, t[1:])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", type=Path, help="a second submission directory, timed as mode 'other'")
    ap.add_argument("--modes", default="floor,alloc,fast,jit", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--sets", type=int, default=4, help="fresh input sets per case and mode")
    args = ap.parse_args()
    modes = [x for x in args.modes.split(",") if x]
    if not modes or set(modes) - set(MODES) or ("other" in modes) != (args.other is not None):
        ap.error(f"--modes takes {', '.join(MODES)}; 'other' needs --other and --other needs 'other'")
    task = get_task("block_sparse_attn")
    m, c = task.module, task.contract
    allcases = {x.name: x for s in ("quick", "full") for x in task.suite(s).cases}
    specs = [dict(allcases[n].params) for n in CASES]
    subs, fns = {}, {}
    for mode, path in (("fast", ROOT / "submissions" / "block_sparse_attn"), ("other", args.other)):
        if path is None:
            continue
        entry = c.load(path)
        c.setup(entry, specs, "cuda")
        subs[mode], fns[mode] = sys.modules[entry.fn.__module__], entry.fn
    sub = subs["fast"]
    tiny = torch.zeros(1, device="cuda")
    for name in CASES:
        case = allcases[name]
        res = {k: [] for k in modes}
        steps = {"steps": [], "steps_int": []}
        for i in range(args.sets * len(modes)):
            mode = modes[i % len(modes)]
            inputs = m.generate(dict(case.params, seed=case.seed + i), "cuda")
            a = [inputs[k] for k in ARGS]
            sub.FAST_LAUNCH = mode != "jit"
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            t0 = time.perf_counter()
            if mode == "floor":
                tiny.add_(1)
            elif mode == "alloc":
                o, lse = _two_allocations(a[0])
            elif mode == "alloc1":
                o, lse = _one_allocation(a[0])
            elif mode == "other":
                o, lse = fns["other"](*a)
            elif mode == "alloc_ee":
                o = torch.empty(a[0].shape, dtype=a[0].dtype, device="cuda")
                lse = torch.empty(a[0].shape[:3], dtype=torch.float32, device="cuda")
            elif mode in steps:
                steps[mode].append(_stepped_call(sub, a, ints=mode == "steps_int"))
            else:
                o, lse = fns["fast"](*a)
            t1 = time.perf_counter()
            e1.record()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            res[mode].append(((t1 - t0) * 1e3, (t2 - t0) * 1e3, e0.elapsed_time(e1)))
            del inputs, a
        for mode in modes:
            r = res[mode]
            print(f"{name:18s} {mode:5s} return {statistics.median(x[0] for x in r):.3f} ms  "
                  f"total {statistics.median(x[1] for x in r):.3f} ms  "
                  f"events {statistics.median(x[2] for x in r):.3f} ms  (n={len(r)})", flush=True)
        for mode, rows in steps.items():
            for j, step in enumerate(STEPS if rows else ()):
                print(f"{name:18s}   {mode:9s} {step:20s} {statistics.median(x[j] for x in rows):.4f} ms",
                      flush=True)
    sub.FAST_LAUNCH = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
