"""bench/crosscheck.py on CPU: the inputs it times are the runner's, and its agreement table."""
import importlib.util

import pytest
import torch

from tests.helpers import ROOT


def _crosscheck():
    spec = importlib.util.spec_from_file_location("crosscheck_under_test", ROOT / "bench" / "crosscheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and a.equal(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("task_name", ["qknorm", "block_sparse_attn", "mla_decode"])
def test_the_inputs_and_ground_truth_are_the_runners(task_name):
    """crosscheck.make_inputs mirrors the runner's own input making (the first call on the case's
    seed, each timed call on a fresh seed from the run's nonce, generate_timed where the task has
    it). Read against Runner._make itself, so that a change there shows here."""
    from kbench.run.runner import Options, Runner
    from kbench.tasks.task import get_task

    crosscheck = _crosscheck()
    task = get_task(task_name)
    case = task.suite("smoke").cases[0]
    runner = Runner(task, Options(suite="smoke", device="cpu", baseline="none"))
    for index in (0, 1, 5):
        inputs, expected = crosscheck.make_inputs(task, case, index, runner.nonce, "cpu")
        their_inputs, their_expected, _ = runner._make(case, index)
        assert _same(inputs, their_inputs), index
        assert _same(expected, tuple(their_expected)), index
    later, _ = crosscheck.make_inputs(task, case, 1, runner.nonce + 1, "cpu")
    assert not _same(later, inputs)   # another run's nonce, other timed inputs


def test_the_agreement_says_which_medians_were_host_timed():
    crosscheck = _crosscheck()

    def plain(ms, gate_off):
        return {"median_ms": ms, "noise": 0.002, "do_bench_ms": ms, "gate_off": gate_off}

    rows = [{"case": "c", "submission": plain(0.2000, False), "baseline": plain(16.33, True)}]
    result = {"cases": [{"case": "c", "latency_ms": 0.2010, "noise": 0.003,
                         "baseline_latency_ms": 16.87, "baseline_noise": 0.01}]}
    (sub, base) = crosscheck.agreement(rows, result)
    assert sub[:2] == ("c", "submission") and sub[5:] == (True, True, False)
    assert base[:2] == ("c", "baseline") and base[5] is False and base[7] is True   # 3.3% off, host-timed
