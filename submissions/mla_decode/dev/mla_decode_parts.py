"""Where a call of the bundled mla_decode kernel spends its time, which `kbench eval` (whole calls
only) does not say: each step of custom_kernel alone, and the attention kernel's launch configs.

    python submissions/mla_decode/dev/mla_decode_parts.py [--suite full] [--case prefill6144] [--calls 20]
        [--sweep] [--submission DIR] [--device cuda|cpu]

(on the GPU host, from the repository root, after `source bench/gpu_env.sh`.)

Each step runs on the case's own inputs (the intermediate tensors computed once, as
custom_kernel computes them) and is timed with kbench's own protocol for one call
(kbench.worker.timer.CallTimer: the gate, inputs copied to fresh storages, L2 flush, CUDA
events), the median of --calls calls. --sweep then tries the attention kernel's launch
configurations: each must pass the case's check through the contract before it is timed.
`--device cpu` runs a smoke case through Triton's interpreter: a check of this script, its
times mean nothing.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]   # the repository
sys.path.insert(0, str(ROOT))
from call_median import median_ms

# block_h, block_n, v_split, warps, stages, rope_pass (keys' RoPE rotated once per row by a pass of its own),
# gluon (the Gluon kernel of mla_decode_gluon.py on Hopper, which rotates the keys itself; the first six keys are
# then the Triton kernel's only)
SWEEP = [(64, 64, 1, 8, 2, True, False), (64, 64, 1, 8, 2, True, True)]
KEYS = ("block_h", "block_n", "v_split", "num_warps", "num_stages", "rope_pass", "gluon")


def steps(kernel, inputs: dict, prepare) -> dict:
    """Each step of custom_kernel as (its inputs, a function of them), on this case's tensors."""
    import torch

    config, x, cache = prepare(dict(inputs))
    bs, dim = x.shape[0], x.shape[-1]
    H, R = config.n_heads, config.kv_lora_rank
    nope, rope, vd = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
    x2 = x.view(bs, dim)
    w = config.KV_proj_up_weight.view(H, nope + vd, R)
    q = ((x2 @ config.Q_proj_down_weight.t()) @ config.Q_proj_up_weight.t()).view(bs, H, nope + rope)
    q_lat = torch.bmm(q[..., :nope].transpose(0, 1), w[:, :nope])
    kv_len = cache.seq_len + 1
    o = kernel.mla_attention(q_lat, q, cache.data, kv_len, nope, 1.0 / math.sqrt(nope + rope))
    return {
        "KV down-projection (the appended row)": (
            {"x": x2, "w": config.KV_proj_down_weight}, lambda a: (a["x"] @ a["w"].t(),)),
        "Q down + up projection": (
            {"x": x2, "down": config.Q_proj_down_weight, "up": config.Q_proj_up_weight},
            lambda a: ((a["x"] @ a["down"].t()) @ a["up"].t(),)),
        "Q up + absorption, fused (kernel.q_up_absorbed; None: not used at this shape)": (
            {"x1": x2 @ config.Q_proj_down_weight.t(), "up": config.Q_proj_up_weight, "w": w},
            lambda a: kernel.q_up_absorbed(a["x1"], a["up"], a["w"][:, :nope], H, nope, rope) or ()),
        "absorption bmm (q_nope -> latent)": (
            {"q": q, "w": w}, lambda a: (torch.bmm(a["q"][..., :nope].transpose(0, 1), a["w"][:, :nope]),)),
        "keys' RoPE pass (Triton kernel only)": (
            {"kv": cache.data},
            lambda a: (kernel.rope_keys(a["kv"], kv_len, R, *kernel._trig_table(rope // 2, a["kv"].shape[1], a["kv"].device)),)),
        "attention kernel": (
            {"q_lat": q_lat, "q": q, "kv": cache.data},
            lambda a: (kernel.mla_attention(a["q_lat"], a["q"], a["kv"], kv_len, nope, 1.0 / math.sqrt(nope + rope)),)),
        "W_uv product into wo's rows": (
            {"o": o, "w": w}, lambda a: (kernel.values_to_rows(a["o"], a["w"][:, nope:]),)),
        "W_uv product + wo": (
            {"o": o, "w": w, "wo": config.wo_weight},
            lambda a: (torch.mm(a["wo"], kernel.values_to_rows(a["o"], a["w"][:, nope:]).t()).t(),)),
        "wo alone (y^T = wo . rows^T)": (
            {"v": o.new_empty(bs, H * vd).normal_(), "wo": config.wo_weight}, lambda a: (torch.mm(a["wo"], a["v"].t()).t(),)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default=None, help="the suite of --case (default: full; smoke on CPU)")
    ap.add_argument("--case", default=None, help="a case of the suite (default: its last)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--submission", default=str(ROOT / "submissions" / "mla_decode"),
                    help="the submission directory (default: the bundled one), e.g. a variant's copy")
    args = ap.parse_args()
    if args.device == "cpu":  # before anything imports Triton: it reads this once
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from kbench.run.card import flush_bytes
    from kbench.tasks.task import get_task, submission_file
    from kbench.worker.timer import CallTimer

    task = get_task("mla_decode")
    suite = task.suite(args.suite or ("full" if args.device == "cuda" else "smoke"))
    case = next(c for c in suite.cases if c.name == (args.case or suite.cases[-1].name))
    contract, module = task.contract, task.module
    entry = contract.load(submission_file(task, Path(args.submission)))
    kernel = sys.modules[entry.__module__]
    inputs = module.generate(dict(case.params), args.device)
    expected = tuple(module.reference(inputs))
    timer = CallTimer(args.device, flush_bytes(args.device))

    def whole(a):
        return contract.call(entry, a)

    with torch.no_grad():
        print(f"{case.name}: {task.module.roofline(case.params)}", flush=True)
        print(f"  {'whole call':<40} {median_ms(timer, whole, inputs, args.calls, contract.prepare) * 1e3:9.1f} us",
              flush=True)
        for name, (step_inputs, fn) in steps(kernel, inputs, contract.prepare).items():
            print(f"  {name:<40} {median_ms(timer, fn, step_inputs, args.calls) * 1e3:9.1f} us", flush=True)
        if args.sweep:
            default = dict(kernel.CONFIG)
            attention = steps(kernel, inputs, contract.prepare)["attention kernel"]
            print(f"attention kernel by {KEYS}:", flush=True)
            launched = {}
            jit = kernel._mla_attn_kernel
            gluon_launch = kernel._gluon.launch if kernel._gluon is not None else None

            def spy_gluon(*a, **k):
                launched["h"] = gluon_launch(*a, **k)
                return launched["h"]

            class Spy:  # keeps the compiled kernel of the last launch: registers, spills, wgmma or not
                def __getitem__(self, grid):
                    def launch(*a, **k):
                        launched["h"] = jit[grid](*a, **k)
                        return launched["h"]
                    return launch
            kernel._mla_attn_kernel = Spy()
            if gluon_launch is not None:
                kernel._gluon.launch = spy_gluon
                kernel._gluon.DIRECT_LAUNCH = False   # every launch through the JIT: it returns the compiled kernel
            kernel.DIRECT_LAUNCH = False
            for config in SWEEP:
                kernel.CONFIG.update(zip(KEYS, config))
                launched.clear()
                try:
                    verdict = module.check(contract.call(entry, contract.prepare(inputs)), expected, inputs)
                    us = median_ms(timer, attention[1], attention[0], args.calls) * 1e3 if verdict.passed else None
                    h = launched.get("h")
                    info = (f" ({h.n_regs} registers, {h.n_spills} spilled, "
                            f"{'wgmma' if 'wgmma' in h.asm.get('ptx', '') else 'no wgmma'})") if h is not None else ""
                    print(f"  {config}: {verdict.status}" + (f", {us:.1f} us" if us else f": {verdict.reason}") + info,
                          flush=True)
                except Exception as exc:  # noqa: BLE001 - a config the card cannot run (shared memory)
                    print(f"  {config}: error {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", flush=True)
            kernel.CONFIG.clear()
            kernel.CONFIG.update(default)
            kernel._mla_attn_kernel = jit
            kernel.DIRECT_LAUNCH = True
            if gluon_launch is not None:
                kernel._gluon.launch = gluon_launch
                kernel._gluon.DIRECT_LAUNCH = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
