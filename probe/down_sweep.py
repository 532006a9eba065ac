"""Probe: the down projections (Q down + KV down, one split-K kernel) by launch shape, operand order
and load path (pointer loads or TMA descriptors), against cuBLAS's two GEMMs; CallTimer medians.
    python probe/down_sweep.py [--bs 128,1] [--calls 30]
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "submissions" / "mla_decode"))

import torch
import triton
import triton.language as tl

import submission as sub
from kbench.run.card import flush_bytes
from kbench.stats.estimates import summarize
from kbench.worker.timer import CallTimer

DIM, DQ, NKV = 7168, 1536, 576


@triton.jit
def _tile(x_ptr, w_ptr, xd, wd, s_x, s_w, M, n_rows, n0, k_lo, K_SPLIT: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWAP: tl.constexpr,
          TMA: tl.constexpr, STAGES: tl.constexpr):
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    mmask = offs_m < M
    nmask = offs_n < n_rows
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in tl.range(k_lo, k_lo + K_SPLIT, BLOCK_K, num_stages=STAGES):
        if TMA:
            a = xd.load([0, k])
            w = wd.load([n0, k])
        else:
            offs_k = k + tl.arange(0, BLOCK_K)
            a = tl.load(x_ptr + offs_m[:, None] * s_x + offs_k[None, :], mask=mmask[:, None], other=0.0)
            w = tl.load(w_ptr + offs_n[:, None] * s_w + offs_k[None, :], mask=nmask[:, None], other=0.0)
        if SWAP:
            acc = tl.dot(w, tl.trans(a), acc)
        else:
            acc = tl.dot(a, tl.trans(w), acc)
    if SWAP:
        return tl.trans(acc)
    return acc


@triton.jit(do_not_specialize=["row_off"])
def _down2(x_ptr, wq_ptr, wkv_ptr, part_ptr, count_ptr, x1_ptr, buf_ptr, M, row_off,
           s_x, s_wq, s_wkv, s_x1, s_buf_b,
           K: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, NP: tl.constexpr, SPLITS: tl.constexpr,
           K_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           SWAP: tl.constexpr, TMA: tl.constexpr, STAGES: tl.constexpr):
    tile = tl.program_id(0)
    split = tl.program_id(1)
    n0 = tile * BLOCK_N
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    mmask = offs_m < M
    xd = None
    wd = None
    if TMA:
        xd = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[s_x, 1], block_shape=[BLOCK_M, BLOCK_K])
    if n0 < NQ:
        if TMA:
            wd = tl.make_tensor_descriptor(wq_ptr, shape=[NQ, K], strides=[s_wq, 1], block_shape=[BLOCK_N, BLOCK_K])
        acc = _tile(x_ptr, wq_ptr + n0 * s_wq, xd, wd, s_x, s_wq, M, NQ - n0, n0, split * K_SPLIT, K_SPLIT,
                    BLOCK_M, BLOCK_N, BLOCK_K, SWAP, TMA, STAGES)
        nmask = n0 + offs_n < NQ
    else:
        if TMA:
            wd = tl.make_tensor_descriptor(wkv_ptr, shape=[NKV, K], strides=[s_wkv, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
        acc = _tile(x_ptr, wkv_ptr + (n0 - NQ) * s_wkv, xd, wd, s_x, s_wkv, M, NKV - (n0 - NQ), n0 - NQ,
                    split * K_SPLIT, K_SPLIT, BLOCK_M, BLOCK_N, BLOCK_K, SWAP, TMA, STAGES)
        nmask = n0 - NQ + offs_n < NKV
    cell = offs_m[:, None] * NP + n0 + offs_n[None, :]
    tl.store(part_ptr + split * BLOCK_M * NP + cell, acc)
    tl.debug_barrier()
    if tl.atomic_add(count_ptr + tile, 1, sem="acq_rel") == SPLITS - 1:
        total = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for s in range(SPLITS):
            total += tl.load(part_ptr + s * BLOCK_M * NP + cell, cache_modifier=".cg")
        out = total.to(tl.bfloat16)
        omask = mmask[:, None] & nmask[None, :]
        if n0 < NQ:
            tl.store(x1_ptr + offs_m[:, None] * s_x1 + n0 + offs_n[None, :], out, mask=omask)
        else:
            tl.store(buf_ptr + offs_m[:, None] * s_buf_b + row_off + n0 - NQ + offs_n[None, :], out, mask=omask)
        tl.atomic_xchg(count_ptr + tile, 0)


def make(cfg, bs):
    block_n, block_k, splits, warps, stages, swap, tma = cfg
    block_m = max(16, triton.next_power_of_2(bs))
    steps = DIM // block_k
    per = triton.cdiv(steps, min(splits, steps))
    splits = triton.cdiv(steps, per)
    k_split = per * block_k
    n_tiles = DQ // block_n + triton.cdiv(NKV, block_n)
    counter = torch.zeros(256, dtype=torch.int32, device="cuda")

    def fn(a):
        x, wq, wkv, buf = a["x"], a["wq"], a["wkv"], a["buf"]
        x1 = torch.empty(bs, DQ, dtype=torch.bfloat16, device="cuda")
        part = torch.empty(splits * block_m * n_tiles * block_n, dtype=torch.float32, device="cuda")
        _down2[(n_tiles, splits)](x, wq, wkv, part, counter, x1, buf, bs, 5 * buf.stride(1),
                                  x.stride(0), wq.stride(0), wkv.stride(0), x1.stride(0), buf.stride(0),
                                  K=DIM, NQ=DQ, NKV=NKV, NP=n_tiles * block_n, SPLITS=splits, K_SPLIT=k_split,
                                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SWAP=swap, TMA=tma,
                                  STAGES=stages, num_warps=warps, num_stages=stages)
        return x1, buf[:, 5]
    return fn


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", default="128,1")
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    timer = CallTimer("cuda", flush_bytes("cuda"))
    same = lambda a: a  # noqa: E731

    def med(fn, inputs):
        s = [timer.timed(fn, same, inputs)[1].device_ms for _ in range(args.calls + 3)]
        return summarize(s[3:]).median * 1e3

    for bs in map(int, args.bs.split(",")):
        g = torch.Generator(device="cuda").manual_seed(bs)
        inputs = {"x": torch.randn(bs, DIM, device="cuda", generator=g).bfloat16(),
                  "wq": (torch.randn(DQ, DIM, device="cuda", generator=g) * 0.02).bfloat16(),
                  "wkv": (torch.randn(NKV, DIM, device="cuda", generator=g) * 0.02).bfloat16(),
                  "buf": torch.zeros(bs, 16, NKV, device="cuda", dtype=torch.bfloat16)}
        ref_q = (inputs["x"].float() @ inputs["wq"].float().t())
        ref_kv = (inputs["x"].float() @ inputs["wkv"].float().t())
        scale = ref_q.abs().max().item()

        def cublas(a):
            return a["x"] @ a["wq"].t(), a["x"] @ a["wkv"].t()

        def bundled(a):
            return sub.down_project(a["x"], a["wq"], a["wkv"], a["buf"], 5), a["buf"][:, 5]
        print(f"bs {bs}: cuBLAS two GEMMs {med(cublas, inputs):.1f} us, bundled {med(bundled, inputs):.1f} us",
              flush=True)

        def trial(cfg):
            fn = make(cfg, bs)
            try:
                buf = inputs["buf"].clone()
                x1, row = fn({**inputs, "buf": buf})
                torch.cuda.synchronize()
                err = max((x1.float() - ref_q).abs().max().item(), (row.float() - ref_kv).abs().max().item())
                if err > 0.02 * scale:
                    return None, f"wrong ({err:.3g})"
                return med(fn, inputs), f"err {err:.2g}"
            except Exception as exc:  # noqa: BLE001
                return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"

        results = {}
        base = (64, 64, 8, 4, 4)
        for swap, tma in itertools.product((False, True), (False, True)):
            cfg = (*base, swap, tma)
            results[cfg] = trial(cfg)
            print(f"  {cfg}: {results[cfg]}", flush=True)
        ok = {c: r[0] for c, r in results.items() if r[0] is not None}
        modes = sorted(ok, key=ok.get)[:1]
        for swap, tma in {(c[5], c[6]) for c in modes}:
            for bn, bk, sp, w, st in itertools.product((64, 128), (64, 128), (4, 8, 16), (4, 8), (3, 4)):
                cfg = (bn, bk, sp, w, st, swap, tma)
                if cfg in results:
                    continue
                results[cfg] = trial(cfg)
        ok = {c: r[0] for c, r in results.items() if r[0] is not None}
        print(f"bs {bs}: best 12 of {len(ok)} that ran (of {len(results)}):")
        for c in sorted(ok, key=ok.get)[:12]:
            print(f"  {c}: {ok[c]:.1f} us ({results[c][1]})")
        bad = [(c, r[1]) for c, r in results.items() if r[0] is None]
        print(f"  failed {len(bad)}: {bad[:4]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
