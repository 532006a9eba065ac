"""The honest corpus: unusual but correct submissions. On the CPU, its CPU-capable submissions
called directly on small strided CPU inputs (views of one fused QKV tensor), checked against fp32
math, and triton_plain under the Triton interpreter. On a CUDA device (GPU tests marked), every one
must pass with no flag and no fatal error, on three quick cases that span both head sizes, both
kv-head counts and batch 1 to 256 (all six: twice the time for no new shape class; torch.compile
recompiles per shape)."""
import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from kbench.run.runner import Options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, ROOT, run_suite

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
    # Not pytest.importorskip: that imports triton in this process, ahead of (in pytest's order)
    # tests/tasks/block_sparse_attn/, whose interpreted kernels need it imported after TRITON_INTERPRET.
    if importlib.util.find_spec("triton") is None:
        pytest.skip("could not import 'triton'")
    script = ("import torch\n"
              "from tests.corpora.test_honest import check, fused_inputs, load\n"
              "module = load('triton_plain')\n"
              "check(module, *fused_inputs())\n"
              "check(module, *fused_inputs(lead=(2, 3), hq=4, d=128, dtype=torch.bfloat16, seed=1))\n")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]


HONEST_ALL = sorted(p.parent for p in HONEST.glob("*/submission.py"))
CASES = ("kv8_q32_d64_b256", "kv8_q32_d128_b1", "kv32_q32_d128_b256")


@pytest.mark.gpu
@pytest.mark.parametrize("path", HONEST_ALL, ids=[p.name for p in HONEST_ALL])
def test_honest_submission_passes_clean_on_gpu(path):
    task = get_task("qknorm")
    result = run_suite(task, path, Options(
        # pool=2, not qknorm's 8: flags and verdicts do not depend on it, and eight starts a test cost time
        suite="quick", only=CASES, device="cuda", baseline="none", timeout=120.0, calibrate=True, warmup_ms=5.0, pool=2,
        stop=StopRule(noise=0.02, min_samples=10, max_samples=30, budget_s=0.5)))
    assert result["summary"]["fatal"] is None, result["summary"]["fatal"]
    assert [c["case"] for c in result["cases"]] == list(CASES)
    bad = [(c["case"], c["status"], c["reason"], c["flags"]) for c in result["cases"]
           if c["status"] != "passed" or c["flags"]]
    assert not bad, bad
