"""block_sparse_attn on a GPU: the bundled kernel through the contract on every suite (on a Hopper
GPU the Gluon kernel, elsewhere the Triton one), and which of the two ran."""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from kbench.tasks.interface import load_module

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "reference" / "block_sparse_attn"
SUITES = tomllib.loads((ROOT / "cases" / "block_sparse_attn.toml").read_text())["suites"]

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("suite", ["smoke", "local-dev", "quick", "full"])
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


def test_gluon_kernel_runs_on_hopper():
    """On an H100 the bundled submission must take its Gluon path, not fall back to Triton silently."""
    import torch

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon kernel is for Hopper (sm_90)")
    contract = load_module(REF / "contract.py", "_kbench_contract_block_sparse_attn")
    entry = contract.load(ROOT / "submissions" / "block_sparse_attn")
    try:
        sub = sys.modules[entry.fn.__module__]
        assert sub._gluon is not None, "bsa_gluon failed to import"
        q = torch.zeros((1, 1, 128, 128), device="cuda", dtype=torch.bfloat16)
        assert sub.GLUON and sub._gluon.supported(q, q, q)
    finally:
        contract.unload(entry)


@pytest.fixture
def on_hopper():
    """The bundled submission through the contract on a Hopper GPU, set up for the smoke and quick
    cases: (task, contract, entry, the submission's module, cases); unloaded afterwards."""
    import torch

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon kernel is for Hopper (sm_90)")
    task = load_module(REF / "task.py", "_kbench_task_block_sparse_attn")
    contract = load_module(REF / "contract.py", "_kbench_contract_block_sparse_attn")
    entry = contract.load(ROOT / "submissions" / "block_sparse_attn")
    try:
        cases = SUITES["smoke"]["cases"] + SUITES["quick"]["cases"]
        contract.setup(entry, cases, "cuda")
        yield task, contract, entry, sys.modules[entry.fn.__module__], cases
    finally:
        contract.unload(entry)


def test_cached_descriptors_give_the_ordinary_launchs_outputs(on_hopper):
    """The Gluon kernel's direct launcher (TMA descriptors cached by address) against the ordinary
    launch, bit for bit, over shapes that change between calls: a tensor at an address seen before
    with another shape must get its own descriptor, never the cached one."""
    import torch

    task, contract, entry, sub, cases = on_hopper
    try:
        outputs = {}
        for direct in (False, True):
            sub.DIRECT_DESCRIPTORS = direct
            sub._DIRECT.clear()
            for round_ in range(2):   # the second time round, addresses repeat with other shapes
                for case in cases:
                    inputs = task.generate(dict(case, seed=case["seed"]), "cuda")
                    out = [t.clone() for t in contract.call(entry, inputs)]
                    torch.cuda.synchronize()
                    outputs.setdefault((case["name"], round_), []).append(out)
                    del inputs
            assert any(d is not None for d in sub._DIRECT.values()) == direct, "the direct launcher did not run"
        for name, (plain, cached) in outputs.items():
            for a, b in zip(plain, cached):
                assert torch.equal(a, b), f"{name}: outputs differ with cached descriptors"
    finally:
        sub.DIRECT_DESCRIPTORS = True


def test_lean_launch_gives_the_direct_launchers_outputs_and_refuses_what_it_cannot_take(on_hopper):
    """Once the direct launcher exists, a call takes the lean path (pointers read once, handed to the
    C launcher as ints; its outputs made at the end of the call before): the same bits as the
    direct launcher's own launch on every smoke and quick case, and never the storage of an output
    returned before and still held. Inputs it cannot take (non-contiguous k, fp16 v, int64 row_ptr,
    row_ptr off 16-byte alignment) are refused before anything is launched, so _launch gets them."""
    import torch

    task, contract, entry, sub, cases = on_hopper
    launcher_type = sub._gluon.DirectLauncher
    original, taken = launcher_type.launch_pointers, []

    def counting(self, *args, **kwargs):
        taken.append(1)
        return original(self, *args, **kwargs)

    launcher_type.launch_pointers = counting
    try:
        for case in cases:
            inputs = task.generate(dict(case, seed=case["seed"]), "cuda")
            args = [inputs[n] for n in ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")]
            held = [contract.call(entry, inputs)]   # the first call of a key may create the direct launcher
            before = len(taken)
            held += [contract.call(entry, inputs) for _ in range(3)]
            assert len(taken) == before + 3, f"{case['name']}: the lean path was not taken"
            storages = {t.untyped_storage().data_ptr() for out in held for t in out}
            assert len(storages) == 2 * len(held), f"{case['name']}: an output shares a held output's storage"
            q = args[0]
            o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
            sub._launch_gluon(*args, o, lse)
            torch.cuda.synchronize()
            for lean in held[1:]:
                assert torch.equal(lean[0], o) and torch.equal(lean[1], lse), f"{case['name']}: outputs differ"
            del held
        q, k, v, row_ptr, col_idx, seq_lens = args
        shifted = torch.zeros(row_ptr.numel() + 1, device=q.device, dtype=row_ptr.dtype)
        shifted[1:] = row_ptr.flatten()
        refused = {
            "non-contiguous k": (q, torch.cat([k, k], -1)[..., :q.shape[-1]], v, row_ptr, col_idx, seq_lens),
            "fp16 v": (q, k, v.half(), row_ptr, col_idx, seq_lens),
            "int64 row_ptr": (q, k, v, row_ptr.long(), col_idx, seq_lens),
            "row_ptr off alignment": (q, k, v, shifted[1:].view(row_ptr.shape), col_idx, seq_lens),
        }
        for name, call_args in refused.items():
            before = len(taken)
            assert sub._launch_lean(*call_args) is None, f"{name}: taken"
            assert len(taken) == before, f"{name}: refused, yet launched"
    finally:
        launcher_type.launch_pointers = original


def test_persistent_kernels_tile_counter_is_back_at_zero(on_hopper):
    """The Gluon kernel's programs take tiles from a counter in device memory, one per stream, that
    every launch must leave at zero (its last program resets it); a counter left behind would make
    the next call on that stream skip tiles. Calls of several shapes, three in a row on the default
    stream and on a second one: the same bits every call, and every counter at zero afterwards."""
    import torch

    task, contract, entry, sub, cases = on_hopper
    side = torch.cuda.Stream()
    for case in cases:
        inputs = task.generate(dict(case, seed=case["seed"]), "cuda")
        torch.cuda.synchronize()
        for stream in (torch.cuda.current_stream(), side):
            with torch.cuda.stream(stream):
                outs = [[t.clone() for t in contract.call(entry, inputs)] for _ in range(3)]
            torch.cuda.synchronize()
            for later in outs[1:]:
                assert all(torch.equal(a, b) for a, b in zip(outs[0], later)), f"{case['name']}: calls differ"
    counters = sub._gluon._COUNTERS
    assert len(counters) == 2, f"expected a counter per stream, found {len(counters)}"
    for key, counter in counters.items():
        assert counter.tolist() == [0, 0], f"counter {key} left at {counter.tolist()}"


@pytest.mark.parametrize("batch,heads,t_max", [(1, 1, 512), (1, 5, 1024), (2, 7, 1024), (3, 11, 768), (4, 33, 512)])
def test_gluon_kernel_writes_every_tile(on_hopper, batch, heads, t_max):
    """Every (batch, head, query block) is some program's tile exactly once, whatever the count of
    (batch, head)s against the programs and the counter's tail (a third of them, query block major):
    o and lse start as NaN, and after one call the check against the reference passes. Ragged
    sequences, so padded tiles (skipped by the producer, written by the consumers) are among them."""
    import torch

    task, contract, entry, sub, cases = on_hopper
    quick = next(c for c in SUITES["quick"]["cases"] if c["family"] == "sliding_window")
    case = {k: v for k, v in quick.items() if k not in ("case_id", "public_suite")}
    case.update(name=f"tiles-{batch}x{heads}x{t_max}", batch_size=batch, num_heads=heads, t_max=t_max)
    inputs = task.generate(case, "cuda")
    q = inputs["q"]
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=q.device, dtype=torch.float32)
    sub._launch_gluon(q, inputs["k"], inputs["v"], inputs["row_ptr"], inputs["col_idx"], inputs["seq_lens"], o, lse)
    torch.cuda.synchronize()
    assert not o.isnan().any() and not lse.isnan().any(), "a tile was never written"
    verdict = task.check((o, lse), task.reference(inputs), inputs)
    assert verdict.passed, verdict.reason
