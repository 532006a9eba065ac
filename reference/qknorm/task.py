"""qknorm, parent side: inputs, fp32 ground truth, tolerance, baselines, native score.

Origin: Frontier-CS research/problems/qknorm (see the spec). Each head vector x becomes
x / sqrt(mean(x^2) + eps) * w in fp32, rounded to the input dtype.
"""
from __future__ import annotations

import math

import torch

from kbench.tasks.check import combine, compare, score

DESCRIPTION = "RMSNorm of q and k heads read in place from a fused QKV tensor (Frontier-CS)"
EPS = 1e-6          # flashinfer's default; the original never passes it
RTOL, ATOL = 1e-2, 5e-3
# Eight worker processes per target on a GPU, each case timed in two of them in turn. Every
# process runs these 4-8 us kernels about 1% faster or slower than another for its whole life
# (SD 0.96-1.18% of a full run's geomean on the H100), drawn independently of the run's other
# processes; a run's geomean averages its pool, so two runs land within 1% of each other about
# 65% of the time with two processes and about 93% with eight (docs/measurement.md, "Processes").
GPU_POOL = 8
BASELINES = {
    "flashinfer": {"path": "baseline_flashinfer.py", "devices": ("cuda",), "requires": ("flashinfer",)},
    "torch": {"path": "baseline_torch.py", "devices": ("cpu", "cuda")},
}


def generate(case: dict, device: str) -> dict:
    """q and k as non-contiguous views of one fused QKV tensor; norm_weight = randn(D)."""
    b, hq, hkv, d = case["batch"], case["num_qo_heads"], case["num_kv_heads"], case["head_dim"]
    dtype = getattr(torch, case.get("dtype", "float16"))
    seq = case.get("seq", 0)
    gen = torch.Generator(device=device).manual_seed(case["seed"])
    lead = (b, seq) if seq else (b,)
    qkv = torch.randn(*lead, hq + 2 * hkv, d, generator=gen, device=device, dtype=dtype)
    weight = torch.randn(d, generator=gen, device=device, dtype=dtype)
    q = qkv[..., :hq, :]
    k = qkv[..., hq:hq + hkv, :]
    return {"qkv": qkv, "q": q, "k": k, "norm_weight": weight}


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def reference(inputs: dict):
    return rmsnorm(inputs["q"], inputs["norm_weight"]), rmsnorm(inputs["k"], inputs["norm_weight"])


def exact(inputs: dict):
    """The same math in float64, not rounded (the suites' health test rounds it and checks it)."""
    def norm(x, w):
        xd = x.double()
        return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    return norm(inputs["q"], inputs["norm_weight"]), norm(inputs["k"], inputs["norm_weight"])


def check(outputs, expected, inputs):
    return combine([compare(name, out, ref, rtol=RTOL, atol=ATOL)
                    for name, out, ref in zip(("q_out", "k_out"), outputs, expected)])


def roofline(case: dict) -> dict:
    """Read q and k once, write both outputs, read the weight."""
    elt = torch.finfo(getattr(torch, case.get("dtype", "float16"))).bits // 8
    rows = case["batch"] * max(case.get("seq", 0), 1) * (case["num_qo_heads"] + case["num_kv_heads"])
    d = case["head_dim"]
    return {"bytes": (2 * rows * d + d) * elt, "flops": 4 * rows * d}


def native_score(results: list[dict], suite: str) -> check.NativeScore:
    """Frontier-CS: 100 x geomean(baseline_ms / answer_ms), clamped to [0, 100]; 0 if any case fails."""
    def frontier(value, unbounded, reason=None):
        return score("Frontier-CS score", value, unit="points", lower_is_better=False,
                            reason=reason, score_unbounded=unbounded)

    speedups = [r["speedup"] for r in results]
    if any(r.get("baseline") not in (None, "flashinfer") for r in results):
        return frontier(None, None, "needs the flashinfer baseline")
    failed = sum(r["status"] != "passed" for r in results)
    if failed:
        return frontier(0.0, 0.0, f"{failed}/{len(results)} cases did not pass: Frontier-CS scores 0")
    if any(s is None or s <= 0 for s in speedups) or not speedups:
        return frontier(None, None, "no speedup over the flashinfer baseline on every case")
    unbounded = 100 * math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    return frontier(round(min(max(unbounded, 0.0), 100.0), 3), round(unbounded, 3))
