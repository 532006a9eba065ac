"""On a CUDA device (skipped without one): the other context lands on the workers' GPU, and a run
makes one before its first timed calls and again after a worker was restarted, following every
worker then loaded (kbench/run/workers.py)."""
import pytest
import torch

from kbench.run import workers
from kbench.run.runner import Options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, run_suite

pytestmark = pytest.mark.gpu

SMOKE = ("b3_q5_kv2_d64_f16", "b1_q4_kv4_d128_bf16", "b2_q3_kv1_d256_bf16", "b2_s3_q4_kv2_d64_bf16")


def _uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid).removeprefix("GPU-")


def test_the_other_context_is_made_on_the_gpu_the_process_numbers_so(monkeypatch):
    for index in range(torch.cuda.device_count()):
        assert workers.make_and_exit(index)["uuid"] == _uuid(index)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(index))   # as a GPU child of `kbench eval --gpus`
        assert workers.make_and_exit(0)["uuid"] == _uuid(index)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")


def test_a_run_makes_one_after_its_workers_and_again_after_a_restart(tmp_path):
    sub = tmp_path / "qknorm"
    sub.mkdir()
    (sub / "submission.py").write_text(   # dies on the head_dim 256 case: its worker is restarted after
        "import os\n"
        + (FIXTURES / "qknorm" / "good_torch" / "submission.py").read_text()
        + "\n_qknorm = qknorm\n\n"
        "def qknorm(q, k, norm_weight):\n"
        "    if q.shape[-1] == 256:\n"
        "        os._exit(3)\n"
        "    return _qknorm(q, k, norm_weight)\n")
    options = Options(suite="smoke", device="cuda", only=SMOKE, baseline="torch", pool=1, processes=1, timeout=60.0,
                      calibrate=False, warmup_ms=5.0, stop=StopRule(noise=0.5, min_samples=10, max_samples=20, budget_s=0.5))
    run = run_suite(get_task("qknorm"), sub, options)
    assert [c["status"] for c in run["cases"]] == ["passed", "passed", "crash", "passed"], run["cases"]
    made = run["wall"]["other_contexts"]
    # the submission's and the baseline's worker before the first case; the restarted one before the last
    assert [(m["before_case"], m["workers"]) for m in made] == [(SMOKE[0], 2), (SMOKE[3], 1)], made
    assert {m["uuid"] for m in made} == {_uuid(torch.cuda.current_device())}
    assert not [n for n in run["notes"] if "another CUDA context" in n]
