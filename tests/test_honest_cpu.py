"""The honest corpus's CPU-capable submissions called directly on small strided CPU inputs
(views of one fused QKV tensor), checked against fp32 math; and triton_plain under the
Triton interpreter."""
import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import FIXTURES, ROOT

HONEST = FIXTURES / "honest" / "qknorm"
ON_CPU = ("torch_eager", "several_launches", "heavy_host_work", "allocates_big_workspace", "host_sync",
          "side_streams_correct", "cuda_graph_cached")


def load(name):
    spec = importlib.util.spec_from_file_location(f"honest_qknorm_{name}", HONEST / name / "submission.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fused_inputs(lead=(3,), hq=5, hkv=2, d=64, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(*lead, hq + 2 * hkv, d, generator=gen).to(dtype)
    weight = torch.randn(d, generator=gen).to(dtype)
    return qkv[..., :hq, :], qkv[..., hq:hq + hkv, :], weight


def check(module, q, k, w):
    before = [t.clone() for t in (q, k, w)]
    outs = module.qknorm(q, k, w)
    assert len(outs) == 2
    for x, out in zip((q, k), outs):
        xf = x.float()
        expected = (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
        assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
        torch.testing.assert_close(out, expected, rtol=1e-2, atol=5e-3)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, w)))  # inputs untouched


@pytest.mark.parametrize("name", ON_CPU)
def test_honest_submission_is_correct_on_cpu(name):
    module = load(name)
    q, k, w = fused_inputs()
    assert not q.is_contiguous() and not k.is_contiguous()
    check(module, q, k, w)
    check(module, *fused_inputs(lead=(2, 3), hq=4, d=128, dtype=torch.bfloat16, seed=1))  # 4-D, new shape


def test_triton_plain_under_the_interpreter():
    """In a fresh interpreter: TRITON_INTERPRET is read when triton.language is imported."""
    pytest.importorskip("triton")
    script = ("import torch\n"
              "from tests.test_honest_cpu import check, fused_inputs, load\n"
              "module = load('triton_plain')\n"
              "check(module, *fused_inputs())\n"
              "check(module, *fused_inputs(lead=(2, 3), hq=4, d=128, dtype=torch.bfloat16, seed=1))\n")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
