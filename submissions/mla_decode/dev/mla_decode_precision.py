"""mla_decode: how close the bundled kernel's y comes to failing the check, over many fresh seeds.

    python submissions/mla_decode/dev/mla_decode_precision.py [--seeds 200] [--cases b3_h4_ctx300,...]
        [--submission DIR] [--suite smoke] [--device cpu|cuda]
    python submissions/mla_decode/dev/mla_decode_precision.py --model "qlat=bf16,o=bf16,v=bf16;qlat=fp32,o=fp32"
        --seeds 1000

(from the repository root). On CPU (the default) it runs the `smoke` suite in Triton's interpreter;
`--device cuda --suite full` is the margin check on the GPU (the float64 exact answer is skipped there:
at batch 128 it costs more than the rest).

Per case of the suite and seed (the task's generator with a fresh seed, as kbench's timed calls get):
the ground truth, the exact answer (the task's math in float64, `task.exact`) and the
submission's output through the task's contract. Per call it records
  ratio = max over y's elements of |y - y_ref| / (atol + rtol |y_ref|)
the check's own statistic (the call fails when it exceeds 1, or when the cache is wrong), and
the same ratio against the exact answer for the submission and for the ground truth (each
one's own error). Prints per case: misses, the median / 99th percentile / max of the ratio,
and the medians against the exact answer.

On CPU the submission runs in Triton's interpreter (about 1 s a call). `--model SPEC` runs
a PyTorch model of the bundled kernel's math instead (milliseconds a call), with each of its
roundings switchable: qlat (q_nope @ W_uk), p (the probabilities into the PV dot; fp32 in the
interpreter, bf16 on the GPU), o (the attention output), v (o @ W_uv), each `bf16` or `fp32`
(unnamed ones take the defaults: qlat, o and v bf16, p fp32); several models separated by `;`
run on the same seeds. The rounding comments in submission.py came from this script.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]   # the repository
sys.path.insert(0, str(ROOT))


def ratio(out, ref, rtol: float, atol: float) -> float:
    a, b = out.double(), ref.double()
    return float(((a - b).abs() / (atol + rtol * b.abs())).max())


def model_of_kernel(inputs: dict, model, spec: dict):
    """The bundled kernel's math in PyTorch, every rounding as `spec` says (y, kv buffer)."""
    import torch

    bf16, f32 = torch.bfloat16, torch.float32

    def rnd(t, key):
        return t.to(bf16).to(f32) if spec[key] == "bf16" else t

    cfg = model.config_of(inputs)
    x, buf, prefill = inputs["x"], inputs["kv_data"].clone(), int(inputs["prefill"])
    bs, dim = x.shape[0], x.shape[-1]
    H, R, nope, rope, vd = cfg.n_heads, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    x2 = x.view(bs, dim)
    buf[:, prefill] = x2 @ cfg.KV_proj_down_weight.t()
    L = prefill + 1
    q = ((x2 @ cfg.Q_proj_down_weight.t()) @ cfg.Q_proj_up_weight.t()).view(bs, H, nope + rope)
    w = cfg.KV_proj_up_weight.view(H, nope + vd, R).to(f32)
    q_lat = rnd(torch.einsum("bhn,hnr->bhr", q[..., :nope].to(f32), w[:, :nope]), "qlat")
    half = rope // 2
    theta = 10000 ** (-torch.arange(0, half, dtype=bf16) / half)

    def rot(t, pos):
        ang = torch.einsum("s,d->sd", pos, theta)
        c, s = ang.cos().to(bf16).to(f32), ang.sin().to(bf16).to(f32)
        t = t.to(f32)
        a, b = t[..., :half], t[..., half:]
        r = lambda z: z.to(bf16).to(f32)
        return torch.cat([r(r(a * c) + r(-b * s)), r(r(b * c) + r(a * s))], -1)

    c = buf[:, :L, :R].to(f32)
    kpe = rot(buf[:, :L, R:], torch.arange(L))
    qpe = rot(q[..., nope:], torch.full((1,), L - 1))
    s = (torch.einsum("bhr,bnr->bhn", q_lat, c) + torch.einsum("bhd,bnd->bhn", qpe, kpe)) / math.sqrt(nope + rope)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    o = rnd(torch.einsum("bhn,bnr->bhr", rnd(p, "p"), c) / p.sum(-1, keepdim=True), "o")
    v = rnd(torch.einsum("bhr,hvr->bhv", o, w[:, nope:]), "v")
    y = (v.reshape(bs, H * vd) @ cfg.wo_weight.to(f32).t()).to(bf16)
    return y.view(bs, 1, dim), buf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    ap.add_argument("--suite", default="smoke")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--submission", default=str(ROOT / "submissions" / "mla_decode"))
    ap.add_argument("--model", default=None, help="qlat=..,p=..,o=..,v=.. (bf16|fp32): the PyTorch model")
    ap.add_argument("--tag", default="precision", help="seeds are derive_seed('mla-precision', TAG, case, i)")
    args = ap.parse_args()
    if args.model and args.device != "cpu":
        ap.error("--model is a CPU model of the kernel: leave out --device")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports Triton
    import torch

    from kbench.tasks.interface import load_sibling
    from kbench.tasks.suites import derive_seed
    from kbench.tasks.task import get_task, submission_file

    task = get_task("mla_decode")
    module, contract = task.module, task.contract
    model = load_sibling(task.code_dir, "mla_model")   # the task's own module (one per process)
    rtol, atol = module.RTOL, module.ATOL
    if args.model:
        runs = {}
        for text in args.model.split(";"):
            spec = {"qlat": "bf16", "p": "fp32", "o": "bf16", "v": "bf16"}
            spec.update(kv.split("=") for kv in text.split(","))
            runs[",".join(f"{k}={v}" for k, v in spec.items())] = functools.partial(
                model_of_kernel, model=model, spec=spec)
    else:
        entry = contract.load(submission_file(task, Path(args.submission)))
        runs = {args.submission: lambda inputs: contract.call(entry, contract.prepare(inputs))}
    names = args.cases.split(",") if args.cases else None
    total_miss = 0
    with torch.no_grad():
        for case in task.suite(args.suite).cases:
            if names and case.name not in names:
                continue
            start = time.perf_counter()
            stats = {label: ([], [], [0, None]) for label in runs}
            ref_own = []
            for i in range(args.seeds):
                seed = derive_seed("mla-precision", args.tag, case.name, i)
                inputs = module.generate(dict(case.params, seed=seed), args.device)
                expected = tuple(module.reference(inputs))
                exact_y = module.exact(inputs)[0] if args.device == "cpu" else None
                if exact_y is not None:
                    ref_own.append(ratio(expected[0], exact_y, rtol, atol))
                for label, run in runs.items():
                    rs, own, miss = stats[label]
                    out = run(inputs)
                    verdict = module.check(tuple(out), expected, inputs)
                    rs.append(ratio(out[0], expected[0], rtol, atol))
                    if exact_y is not None:
                        own.append(ratio(out[0], exact_y, rtol, atol))
                    if not verdict.passed:
                        miss[0] += 1
                        miss[1] = miss[1] or f"seed {seed}: {verdict.reason}"
            r = torch.tensor(ref_own)
            print(f"{case.name} ({args.seeds} seeds, {time.perf_counter() - start:.0f} s)" + (
                f": ground truth's error/tolerance vs exact: median {r.median():.3f} max {r.max():.3f}"
                if ref_own else ""), flush=True)
            for label, (rs, own, (misses, first)) in stats.items():
                total_miss += misses
                t, o = torch.tensor(rs), torch.tensor(own)
                mine = f"; own (vs exact) median {o.median():.3f} max {o.max():.3f}" if own else ""
                print(f"  {label}: {misses}/{args.seeds} calls fail; y error/tolerance vs ground truth "
                      f"median {t.median():.3f} p99 {t.quantile(0.99):.3f} max {t.max():.3f}{mine}"
                      + (f"; first: {first}" if first else ""), flush=True)
    return 1 if total_miss else 0


if __name__ == "__main__":
    sys.exit(main())
