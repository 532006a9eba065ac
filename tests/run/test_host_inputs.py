"""The cases' first inputs drawn ahead on a background thread (kbench/run/inputs.py)."""
import threading

import pytest
import torch

from kbench.run.inputs import AHEAD, HostInputs
from kbench.run.runner import Options
from kbench.tasks.task import get_task
from tests.helpers import ROOT, run_suite


def test_draws_ahead_in_order_on_another_thread_and_gives_the_draws_values():
    drawn, threads = [], set()

    def draw(params):
        drawn.append(params["seed"])
        threads.add(threading.current_thread().name)
        return {"x": torch.full((2,), float(params["seed"])), "n": params["seed"]}

    inputs = HostInputs(draw, [(f"c{s}", {"seed": s}) for s in (10, 11, 12, 13)])
    first = inputs.take("c10", "cpu")
    assert torch.equal(first["x"], torch.full((2,), 10.0)) and first["n"] == 10
    assert inputs.take("c11", "cpu")["n"] == 11
    assert inputs.take("c13", "cpu")["n"] == 13          # a case skipped: drawn on demand
    inputs.close()
    assert drawn[:AHEAD + 1] == [10, 11][:AHEAD + 1]  # the first cases drawn before they were asked for
    assert 13 in drawn and drawn.count(10) == 1
    assert threading.current_thread().name not in threads


def test_a_draws_exception_is_raised_where_the_case_takes_its_inputs():
    def draw(params):
        raise ValueError(f"bad case {params['seed']}")

    inputs = HostInputs(draw, [("a", {"seed": 1}), ("b", {"seed": 2})])
    with pytest.raises(ValueError, match="bad case 1"):
        inputs.take("a", "cpu")
    inputs.close()


def test_generate_host_gives_generates_tensors():
    task = get_task("block_sparse_attn")
    case = task.suite("smoke").cases[1]
    params = dict(case.params, seed=case.seed)
    host, direct = task.module.generate_host(params), task.module.generate(params, "cpu")
    assert host.keys() == direct.keys() and all(torch.equal(host[k], direct[k]) for k in direct)


def test_a_run_takes_each_cases_first_inputs_from_generate_host(monkeypatch):
    task = get_task("block_sparse_attn")
    module = task.module
    calls = []
    real = module.generate_host
    monkeypatch.setattr(module, "generate_host", lambda case: calls.append(case["seed"]) or real(case))
    cases = task.suite("smoke").cases[:2]
    result = run_suite(task, ROOT / "submissions" / "block_sparse_attn", Options(
        suite="smoke", device="cpu", baseline="none", only=tuple(c.name for c in cases)))
    assert [c["status"] for c in result["cases"]] == ["passed", "passed"], result["cases"]
    assert calls == [c.seed for c in cases]
