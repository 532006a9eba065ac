"""Before a case's timed calls, another CUDA context is made after every loaded worker's own
(kbench/run/workers.py): which workers that covers, when it is made again, and what a run
says when it cannot be made. The GPU side is in tests/test_other_context_gpu.py."""
from types import SimpleNamespace

import pytest
import torch

from kbench.run import workers
from kbench.run.runner import Options, Runner
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES


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
