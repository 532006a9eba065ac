"""Probe: launch shapes of mla_decode's projection kernels at one case, each step timed alone under kbench's
protocol (CallTimer: gate, L2 flush, CUDA events; median of CALLS). Output checked against the default shape.

    python3 probe/mla_sweep.py CASE [--suite full] [--what qup,down,wo,rows]
"""
import argparse
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "submissions/mla_decode/dev"))
from call_median import median_ms  # noqa: E402

CALLS = 15


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--suite", default="full")
    ap.add_argument("--what", default="qup,down,wo,rows")
    ap.add_argument("--old", default=None, help="an older submission.py whose _down_kernel is timed beside")
    ap.add_argument("--grid", default=None, help="down shapes 'bn,bk,splits,warps,stages;...' (default: built in)")
    ap.add_argument("--default-only", action="store_true", help="each step's default shape only (for ncu)")
    args = ap.parse_args()
    import torch
    from kbench.run.card import flush_bytes
    from kbench.tasks.task import get_task, submission_file
    from kbench.worker.timer import CallTimer

    task = get_task("mla_decode")
    case = next(c for c in task.suite(args.suite).cases if c.name == args.case)
    contract = task.contract
    entry = contract.load(submission_file(task, ROOT / "submissions/mla_decode"))
    K = sys.modules[entry.__module__]
    inputs = task.module.generate(dict(case.params), "cuda")
    timer = CallTimer("cuda", flush_bytes("cuda"))
    config, x, cache = contract.prepare(dict(inputs))
    bs, dim = x.shape[0], x.shape[-1]
    H, R = config.n_heads, config.kv_lora_rank
    nope, rope, vd = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
    x2 = x.view(bs, dim).contiguous()
    wqd, wkvd, wqu, wkvu, wo = (config.Q_proj_down_weight, config.KV_proj_down_weight, config.Q_proj_up_weight,
                                config.KV_proj_up_weight, config.wo_weight)
    dq = wqd.shape[0]
    x1 = (x2 @ wqd.t()).contiguous()
    w = wkvu.view(H, nope + vd, R)
    print(f"{case.name} bs {bs}", flush=True)

    def run(name, fn, inp, ref=None):
        try:
            out = fn(inp)
            torch.cuda.synchronize()
            err = ""
            if ref is not None:
                d = max((a.float() - b.float()).abs().max().item() for a, b in zip(out, ref))
                err = f" maxdiff {d:.3g}"
            t0 = time.time()
            us = median_ms(timer, fn, inp, CALLS) * 1e3
            print(f"  {name:<60} {us:8.1f} us{err}  ({time.time() - t0:.1f}s)", flush=True)
            return out
        except Exception as exc:  # noqa: BLE001
            print(f"  {name:<60} error {type(exc).__name__}: {str(exc).splitlines()[0][:100]}", flush=True)
            return None

    what = args.what.split(",")
    if "qup" in what:
        def qup(block_k, warps, stages, block_r=128):
            def fn(a):
                q_lat = torch.empty(H, bs, R, dtype=torch.bfloat16, device="cuda")
                q_pe = torch.empty(bs, H, rope, dtype=torch.bfloat16, device="cuda")
                wuk = a["w"][:, :nope]
                K._q_up_absorb_kernel[(H,)](
                    a["x1"], a["up"], wuk, q_lat, q_pe, bs, a["x1"].stride(0), a["up"].stride(0), wuk.stride(0),
                    wuk.stride(1), q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1),
                    DQ=dq, NOPE=nope, ROPE=rope, R=R, BLOCK_M=max(64, K._next_pow2(bs)), BLOCK_K=block_k,
                    BLOCK_R=block_r, DOT_F32=False, num_warps=warps, num_stages=stages)
                return q_lat, q_pe
            return fn
        inp = {"x1": x1, "up": wqu, "w": w}
        ref = run("qup default (64, 8w, 3s, r128)", qup(64, 8, 3), inp)
        for bk, wa, st, br in [] if args.default_only else [(64, 8, 4, 128), (64, 8, 2, 128), (32, 8, 4, 128), (32, 8, 6, 128), (128, 8, 2, 128),
                               (64, 4, 3, 128), (64, 4, 4, 128), (64, 8, 3, 64), (64, 8, 4, 64), (32, 4, 5, 64)]:
            run(f"qup bk {bk} warps {wa} stages {st} br {br}", qup(bk, wa, st, br), inp, ref)

    if "down" in what:
        def down(block_n, block_k, splits, warps, stages, mod=K):
            block_m = max(16, K._next_pow2(bs))
            steps = dim // block_k
            per = K._cdiv(steps, min(splits, steps))
            sp = K._cdiv(steps, per)
            n_tiles = dq // block_n + K._cdiv(R + rope, block_n)
            part = torch.empty(sp * block_m * n_tiles * block_n, dtype=torch.float32, device="cuda")
            count = torch.zeros(max(64, n_tiles), dtype=torch.int32, device="cuda")

            def fn(a):
                out = torch.empty(bs, dq, dtype=torch.bfloat16, device="cuda")
                mod._down_kernel[(n_tiles, sp)](
                    a["x"], wqd, wkvd, part, count, out, a["buf"], bs, 0, a["x"].stride(0), wqd.stride(0),
                    wkvd.stride(0), out.stride(0), a["buf"].stride(0),
                    K=dim, NQ=dq, NKV=R + rope, NP=n_tiles * block_n, SPLITS=sp, K_SPLIT=per * block_k,
                    BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, DOT_F32=False, num_warps=warps,
                    num_stages=stages)
                return out, a["buf"][:, 0]
            return fn
        inp = {"x": x2, "buf": torch.zeros(bs, 2, R + rope, dtype=torch.bfloat16, device="cuda")}
        d = K.DOWN_WIDE if bs > 64 else {}
        dflt = (64, 64, d.get("splits", 8), d.get("num_warps", 4), 4)
        ref = run(f"down default {dflt}", down(*dflt), inp)
        grid = [(64, 64, 4, 8, 3), (64, 64, 4, 8, 5), (64, 64, 4, 8, 6), (64, 128, 4, 8, 3), (64, 128, 4, 8, 2),
                (64, 32, 4, 8, 6), (64, 64, 3, 8, 4), (32, 64, 2, 4, 4), (32, 64, 2, 8, 4), (32, 128, 2, 4, 3),
                (64, 64, 6, 8, 4), (64, 64, 8, 8, 4)] if bs > 64 else [
                (64, 64, 8, 4, 3), (64, 64, 8, 4, 6), (64, 128, 8, 4, 3), (64, 64, 16, 4, 4), (32, 64, 4, 4, 4),
                (32, 128, 4, 4, 4), (64, 64, 4, 4, 4)]
        if args.grid:
            grid = [tuple(int(v) for v in g.split(",")) for g in args.grid.split(";")]
        if args.old:
            import importlib.util
            spec = importlib.util.spec_from_file_location("old_submission", args.old)
            old = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(old)
            run(f"OLD down {dflt}", down(*dflt, mod=old), inp, ref)
        for g in [] if args.default_only else grid:
            if g != dflt:
                run(f"down {g}", down(*g), inp, ref)

    if "wo" in what:
        v = x.new_empty(bs, H * vd).normal_()
        inp = {"v": v, "wo": wo}
        ref = run("wo mm(wo, v^T)^T", lambda a: (torch.mm(a["wo"], a["v"].t()).t(),), inp)
        run("wo mm(v, wo^T)", lambda a: (torch.mm(a["v"], a["wo"].t()),), inp, ref)
        run("wo F.linear", lambda a: (torch.nn.functional.linear(a["v"], a["wo"]),), inp, ref)
        run("wo mm(wo, v^T) into out", lambda a: (torch.mm(a["wo"], a["v"].t(),
                                                           out=torch.empty(dim, bs, dtype=v.dtype, device="cuda")).t(),), inp, ref)
        wo_grid = [(64, 64, 8, 8, 4), (64, 64, 16, 8, 4), (128, 64, 16, 8, 3), (64, 128, 8, 8, 3)]
        mods = [K] * len(wo_grid)
        if bs <= 16:
            wo_grid = [(64, 64, 8, 4, 4), (64, 64, 8, 4, 4), (64, 64, 8, 4, 6), (64, 64, 8, 4, 8), (64, 128, 8, 4, 4)]
            mods = [None, K, K, K, K]
        if mods[0] is None:
            import importlib.util
            spec = importlib.util.spec_from_file_location("old_submission_wo", args.old)
            mods[0] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mods[0])
        for (block_n, block_k, splits, warps, stages), mod in zip(wo_grid, mods):
            block_m = max(16, K._next_pow2(bs))
            kk = H * vd
            per = K._cdiv(kk // block_k, splits)
            tiles = dim // block_n
            part = torch.empty(splits * block_m * dim, dtype=torch.float32, device="cuda")
            count = torch.zeros(max(64, tiles), dtype=torch.int32, device="cuda")

            def fn(a, block_n=block_n, block_k=block_k, splits=splits, warps=warps, stages=stages, per=per,
                   tiles=tiles, part=part, count=count, block_m=block_m, kk=kk, mod=mod):
                y = torch.empty(bs, dim, dtype=torch.bfloat16, device="cuda")
                mod._down_kernel[(tiles, splits)](
                    a["v"], a["wo"], a["wo"], part, count, y, y, bs, 0, kk, kk, kk, dim, dim,
                    K=kk, NQ=dim, NKV=0, NP=dim, SPLITS=splits, K_SPLIT=per * block_k, BLOCK_M=block_m,
                    BLOCK_N=block_n, BLOCK_K=block_k, DOT_F32=False, num_warps=warps, num_stages=stages)
                return (y,)
            tag = "OLD " if mod is not K else ""
            run(f"{tag}wo down-kernel {(block_n, block_k, splits, warps, stages)}", fn, inp, ref)

    if "rows" in what:
        o = x.new_empty(bs, H, R).normal_()
        inp = {"o": o, "w": w}

        def rows(block_m, block_n, block_k, warps, stages):
            def fn(a):
                out = torch.empty(bs, H * vd, dtype=torch.bfloat16, device="cuda")
                A, B, C = a["o"].transpose(0, 1), a["w"][:, nope:].transpose(1, 2), out.view(bs, H, vd).transpose(0, 1)
                K._head_bmm_kernel[(vd // block_n, K._cdiv(bs, block_m), H)](
                    A, B, C, bs, R, *A.stride(), *B.stride(), *C.stride(),
                    BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, DOT_F32=False, num_warps=warps,
                    num_stages=stages)
                return (out,)
            return fn
        bm = min(128, max(16, K._next_pow2(bs)))
        ref = run(f"rows default ({bm}, 64, 128, 8, 2)", rows(bm, 64, 128, 8, 2), inp)
        for g in [(bm, 64, 64, 8, 3), (bm, 64, 64, 4, 4), (bm, 128, 64, 8, 3), (bm, 32, 128, 4, 2), (bm, 64, 128, 4, 2)]:
            run(f"rows {g}", rows(*g), inp, ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
