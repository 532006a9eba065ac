"""mla_decode on one GPU: bit-exact inputs, correctness on every original case, timings.

    python bench/mla_decode_gpu.py [--out DIR] [--cases prefill512,prefill6144] [--sweep]

Checks the bundled solution, the FlashInfer baseline and (once) the eager reference on
every original case against the chunked ground truth; times them with CUDA events, an
L2 flush before every call and the cache reset (contract.prepare) outside the timed
region, interleaved; prints a table and writes it, with a JSON log, under --out.
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
import tomllib
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.loader import load_module  # noqa: E402  (after the checkout is on the path)
REF = ROOT / "reference" / "mla_decode"




task = load_module(REF / "task.py", "mla_task")
contract = load_module(REF / "contract.py", "mla_contract")
model = sys.modules["_kbench_mla_decode_mla_model"]


def original_recipe(batchsize, dim, dq, prefill, seed):
    """The original generate_input, transcribed call for call (weights, x, prefill rows)."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    r = lambda *s: torch.randn(s, dtype=torch.bfloat16, generator=gen, device="cuda")  # noqa: E731
    w = [r(dq, dim) / math.sqrt(dim), r(512 + 64, dim) / math.sqrt(dim),
         r((128 + 64) * 128, dq) / math.sqrt(dq), r((128 + 128) * 128, 512) / math.sqrt(512),
         r(dim, 128 * 128) / math.sqrt(128 * 128)]
    x = r(batchsize, 1, dim)
    pre = r(batchsize, prefill, 512 + 64)
    return w, x, pre


def copy_bandwidth() -> float:
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    for _ in range(10):
        b.copy_(a)
    e1.record()
    torch.cuda.synchronize()
    return 2 * a.numel() * 10 / (e0.elapsed_time(e1) / 1e3)


def matmul_rate() -> float:
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    for _ in range(20):
        a @ a
    e1.record()
    torch.cuda.synchronize()
    return 2 * 8192 ** 3 * 20 / (e0.elapsed_time(e1) / 1e3)


FLUSH = None


def timed(fn, inputs, reps):
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    out = []
    for _ in range(reps):
        args = contract.prepare(inputs)
        FLUSH.zero_()
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        fn(args)
        e1.record()
        torch.cuda.synchronize()
        out.append(e0.elapsed_time(e1) * 1e3)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "runs/mla_decode"))
    ap.add_argument("--cases", default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    try:
        log["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        log["commit"] = "?"
    bw, mm = copy_bandwidth(), matmul_rate()
    log.update(copy_GBps=bw / 1e9, matmul_TFLOPs=mm / 1e12)
    print(f"{log['device']} torch {torch.__version__} commit {log['commit']}: copy {bw/1e9:.0f} GB/s, "
          f"bf16 matmul {mm/1e12:.0f} TFLOP/s", flush=True)

    sub = contract.load(ROOT / "submissions" / "mla_decode")
    sub_mod = [m for n, m in sys.modules.items() if n.startswith("_kbench_submission_")][-1]
    fi_mod = load_module(REF / "baseline_flashinfer.py", "mla_fi")
    eager = contract.load(REF / "baseline_eager.py")
    cases = tomllib.load(open(ROOT / "cases" / "mla_decode.toml", "rb"))["suites"]["full"]["cases"]
    if args.cases:
        cases = [c for c in cases if c["name"] in args.cases.split(",")]

    # 1. Bit-exact inputs against the original recipe; values to hard-code in the GPU test.
    c0 = next(c for c in tomllib.load(open(ROOT / "cases" / "mla_decode.toml", "rb"))["suites"]["full"]["cases"])
    inp = task.generate(c0, "cuda")
    w, x, pre = original_recipe(c0["batchsize"], c0["dim"], c0["dq"], c0["prefill"], c0["seed"])
    same = all(torch.equal(inp[n], t) for n, t in zip(model.WEIGHTS, w)) and torch.equal(inp["x"], x) \
        and torch.equal(inp["kv_data"][:, :c0["prefill"]], pre) and not inp["kv_data"][:, c0["prefill"]:].any()
    probe = {n: [float(v) for v in inp[n].flatten()[[0, 1, 12345, -1]].float()] for n in model.WEIGHTS + ("x",)}
    probe["kv_data"] = [float(v) for v in inp["kv_data"][[0, 5, 127], [0, 77, 127], [0, 300, 575]].float()]
    log.update(bit_exact=same, probe=probe)
    print("bit-exact vs original recipe:", same, json.dumps(probe), flush=True)
    # chunked ground truth == unchunked math at prefill 128 (the whole batch fits there)
    y1, kv1 = task.reference(inp)
    y2, kv2 = task.reference(inp, batch_chunk=c0["batchsize"])
    log["chunked_equals_unchunked"] = {"y_equal": bool(torch.equal(y1, y2)),
                                       "y_maxdiff": float((y1.float() - y2.float()).abs().max()),
                                       "kv_equal": bool(torch.equal(kv1, kv2))}
    print("chunked vs unchunked at prefill 128:", log["chunked_equals_unchunked"], flush=True)
    del inp, y1, y2, kv1, kv2, w, x, pre

    if args.sweep:
        c = next(c for c in cases if c["prefill"] == 6144) if any(c["prefill"] == 6144 for c in cases) else cases[-1]
        inp = task.generate(c, "cuda")
        exp = task.reference(inp)
        bs, H = inp["batch_size"], inp["n_heads"]
        q = torch.randn(bs, H, 192, dtype=torch.bfloat16, device="cuda")
        ql = torch.randn(H, bs, 512, dtype=torch.bfloat16, device="cuda")
        grid = [(64, 32, 1, 8, 2), (64, 64, 1, 8, 1), (64, 32, 1, 8, 3), (32, 64, 1, 8, 2)]
        sweep = []
        for bh, bn, vs, nw, ns in grid:
            sub_mod.CONFIG.update(block_h=bh, block_n=bn, v_split=vs, num_warps=nw, num_stages=ns)
            try:
                r = task.check(contract.call(sub, contract.prepare(inp)), exp, inp)
                t = statistics.median(timed(lambda a: sub_mod.mla_attention(
                    ql, q, inp["kv_data"], c["prefill"] + 1, 128, 1 / math.sqrt(192)), inp, 8))
                sweep.append((bh, bn, vs, nw, ns, r.status, t))
            except Exception as e:  # noqa: BLE001
                sweep.append((bh, bn, vs, nw, ns, f"error {type(e).__name__}: {str(e)[:80]}", None))
            print("sweep attn-only", sweep[-1], flush=True)
        best = min((s for s in sweep if s[5] == "passed"), key=lambda s: s[6])
        sub_mod.CONFIG.update(block_h=best[0], block_n=best[1], v_split=best[2], num_warps=best[3], num_stages=best[4])
        log["sweep"] = sweep
        print("best", best, flush=True)
        # where the rest of the time goes (prefill 6144)
        cfg, x, kvc = contract.prepare(inp)
        x2 = x.view(bs, -1)
        w = cfg.KV_proj_up_weight.view(H, 256, 512)
        o = torch.randn(bs, H, 512, dtype=torch.bfloat16, device="cuda")
        pieces = {
            "kv_down+append": lambda a: a[2].data.__setitem__((slice(None), c["prefill"]), x2 @ cfg.KV_proj_down_weight.t()),
            "q_down+q_up": lambda a: (x2 @ cfg.Q_proj_down_weight.t()) @ cfg.Q_proj_up_weight.t(),
            "absorb bmm": lambda a: torch.bmm(q[..., :128].transpose(0, 1), w[:, :128]),
            "W_uv bmm+wo": lambda a: torch.bmm(o.transpose(0, 1), w[:, 128:].transpose(1, 2)).transpose(0, 1).reshape(bs, -1) @ cfg.wo_weight.t(),
            "wo only": lambda a: o.view(bs, -1)[:, :16384] @ cfg.wo_weight.t(),
            "whole call": lambda a: sub(a),
        }
        log["pieces_us"] = {k: statistics.median(timed(f, inp, 8)) for k, f in pieces.items()}
        print("pieces (us):", log["pieces_us"], flush=True)
        del inp, exp

    rows = []
    for case in cases:
        t0 = time.time()
        inp = task.generate(case, "cuda")
        exp = task.reference(inp)
        row = {"case": case["name"], "prefill": case["prefill"]}
        rl = task.roofline(case)
        row["roofline_us"] = max(rl["bytes"] / bw, rl["flops"] / mm) * 1e6
        row["bytes_MB"] = rl["bytes"] / 1e6
        row["GFLOP"] = rl["flops"] / 1e9
        targets = {"triton": sub, "flashinfer": fi_mod.custom_kernel}
        if case["prefill"] in (512, 6144):
            targets["eager"] = eager
        for name, fn in list(targets.items()):
            try:
                r = task.check(contract.call(fn, contract.prepare(inp)), exp, inp)
                if name == "flashinfer" and not r.passed and not fi_mod.CONTIGUOUS_CKV:
                    print("flashinfer with strided ckv:", r.status, r.reason, "-> contiguous copy", flush=True)
                    fi_mod.CONTIGUOUS_CKV = True
                    r = task.check(contract.call(fn, contract.prepare(inp)), exp, inp)
                row[f"{name}_status"] = r.status if r.passed else f"{r.status}: {r.reason[:160]}"
                row[f"{name}_abs_err"] = r.max_abs_err
            except Exception as e:  # noqa: BLE001
                row[f"{name}_status"] = f"error {type(e).__name__}: {str(e)[:160]}"
                targets.pop(name)
        for fn in targets.values():   # warm-up
            timed(fn, inp, 2)
        series = {n: [] for n in targets}
        reps = args.reps
        for i in range(reps):          # interleaved
            for n, fn in targets.items():
                if n == "eager" and i >= 3:
                    continue
                series[n] += timed(fn, inp, 1)
        for n, s in series.items():
            row[f"{n}_us"] = statistics.median(s)
            row[f"{n}_iqr_us"] = (statistics.quantiles(s, n=4)[2] - statistics.quantiles(s, n=4)[0]) if len(s) >= 4 else None
        # re-check after the timed calls (the last timed call's KV write included)
        r = task.check(contract.call(sub, contract.prepare(inp)), exp, inp)
        row["triton_recheck"] = r.status
        # split: the attention kernel alone
        cfg, x, kvc = contract.prepare(inp)
        bs, H = cfg.batch_size, cfg.n_heads
        q = torch.randn(bs, H, 192, dtype=torch.bfloat16, device="cuda")
        ql = torch.randn(H, bs, 512, dtype=torch.bfloat16, device="cuda")
        att = timed(lambda a: sub_mod.mla_attention(ql, q, inp["kv_data"], case["prefill"] + 1, 128,
                                                   1 / math.sqrt(192)), inp, 10)
        row["attn_only_us"] = statistics.median(att)
        row["secs"] = time.time() - t0
        rows.append(row)
        print(json.dumps(row), flush=True)
        del inp, exp
        torch.cuda.empty_cache()

    log["rows"] = rows
    log["config"] = dict(sub_mod.CONFIG)
    hdr = (f"| case | roofline us | triton us | x roofline | attn-only us | flashinfer us | "
           f"speedup vs flashinfer | eager us | status (triton / flashinfer) |")
    lines = [hdr, "|" + "---|" * 9]
    for r in rows:
        t, f = r.get("triton_us"), r.get("flashinfer_us")
        lines.append(
            f"| {r['case']} | {r['roofline_us']:.0f} | {t:.0f} | {t / r['roofline_us']:.2f} | "
            f"{r['attn_only_us']:.0f} | {f:.0f} | {f / t:.2f}x | "
            f"{r.get('eager_us', float('nan')):.0f} | {r['triton_status']} / {r['flashinfer_status']} |"
            if t and f else f"| {r['case']} | {json.dumps(r)[:300]} |")
    table = "\n".join(lines)
    print(table)
    (out_dir / "table.md").write_text(table + "\n")
    (out_dir / "log.json").write_text(json.dumps(log, indent=1))


if __name__ == "__main__":
    main()
