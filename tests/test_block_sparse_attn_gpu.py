"""block_sparse_attn on a GPU: the bundled Triton kernel through the contract on quick and full."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kbench.loader import load_module

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "reference" / "block_sparse_attn"
SUITES = tomllib.loads((ROOT / "cases" / "block_sparse_attn.toml").read_text())["suites"]

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_bundled_solution_on_gpu(suite):
    import torch

    task = load_module(REF / "task.py", "_kbench_task_block_sparse_attn")
    contract = load_module(REF / "contract.py", "_kbench_contract_block_sparse_attn")
    entry = contract.load(ROOT / "submissions" / "block_sparse_attn")
    try:
        cases = SUITES[suite]["cases"]
        contract.setup(entry, cases, "cuda")
        for case in cases:
            for seed in (case["seed"], case["seed"] + 1):  # the case and one fresh input set
                inputs = task.generate(dict(case, seed=seed), "cuda")
                out = contract.call(entry, inputs)
                torch.cuda.synchronize()
                verdict = task.check(out, task.reference(inputs), inputs)
                assert verdict.passed, f"{case['name']} seed {seed}: {verdict.reason}"
        contract.after_run(entry)  # nothing compiled after setup
    finally:
        contract.unload(entry)
