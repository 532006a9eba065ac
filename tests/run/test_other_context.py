"""Before a case's timed calls, another CUDA context is made after every loaded worker's own
(kbench/run/workers.py): which workers that covers, when it is made again, and what a run
says when it cannot be made. On a CUDA device (GPU tests marked): the other context lands on
the workers' GPU, and a run makes one before its first timed calls and again after a worker
was restarted, following every worker then loaded."""
from types import SimpleNamespace

import pytest
import torch

from kbench.run import workers
from kbench.run.runner import Options, Runner
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, run_suite


def _worker(readied=True, alive=True):
    return SimpleNamespace(readied=readied, worker=SimpleNamespace(alive=alive), context_followed=False)


class _Maker:
    def __init__(self, fails=False):
        self.calls, self.fails = 0, fails

    def __call__(self):
        self.calls += 1
        if self.fails:
            raise workers.OtherContextError("cuInit returned CUresult 100")
        return {"uuid": "u", "seconds": 0.1}


def test_one_context_follows_every_loaded_worker_and_is_made_again_only_for_a_new_one():
    pool = [_worker(), _worker(), _worker(readied=False), _worker(alive=False)]
    make = _Maker()
    assert workers.follow(pool, make) == {"uuid": "u", "seconds": 0.1, "workers": 2}
    assert [m.context_followed for m in pool] == [True, True, False, False]
    assert workers.follow(pool, make) is None and make.calls == 1   # nothing new: none made
    pool[1].context_followed = False   # restarted (kbench/targets.Target.start)
    pool[2].readied = True             # loaded since
    assert workers.follow(pool, make)["workers"] == 2 and make.calls == 2


def test_workers_stay_unfollowed_when_the_context_cannot_be_made():
    pool = [_worker()]
    with pytest.raises(workers.OtherContextError):
        workers.follow(pool, _Maker(fails=True))
    assert not pool[0].context_followed
    assert workers.follow(pool, _Maker())["workers"] == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a CUDA device only")
def test_without_a_cuda_device_it_fails_with_one_line():
    with pytest.raises(workers.OtherContextError) as info:
        workers.make_and_exit()
    assert "\n" not in str(info.value) and str(info.value)


def test_a_cpu_run_makes_none():
    options = Options(suite="smoke", device="cpu", calibrate=False, warmup_ms=1.0, only=("b3_q5_kv2_d64_f16",),
                      baseline="none", stop=StopRule(min_samples=2, max_samples=2, budget_s=0.5))
    run = Runner(get_task("qknorm"), options).run(FIXTURES / "honest" / "qknorm" / "triton_plain")
    assert run["cases"][0]["status"] == "passed"
    assert run["wall"]["other_contexts"] == []


SMOKE = ("b3_q5_kv2_d64_f16", "b1_q4_kv4_d128_bf16", "b2_q3_kv1_d256_bf16", "b2_s3_q4_kv2_d64_bf16")


def _uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid).removeprefix("GPU-")


@pytest.mark.gpu
def test_the_other_context_is_made_on_the_gpu_the_process_numbers_so(monkeypatch):
    for index in range(torch.cuda.device_count()):
        assert workers.make_and_exit(index)["uuid"] == _uuid(index)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(index))   # as a GPU child of `kbench eval --gpus`
        assert workers.make_and_exit(0)["uuid"] == _uuid(index)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")


@pytest.mark.gpu
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
