"""The bundled kernels' probes (bench/block_sparse_attn/, submissions/mla_decode/dev/) where they run on
CPU: their helpers, and mla_decode_precision.py's model of the kernel's roundings."""
import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.helpers import ROOT

BSA = ROOT / "bench" / "block_sparse_attn"
MLA = ROOT / "submissions" / "mla_decode" / "dev"


def _module(path):
    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bsa_case_gives_the_submissions_scale_and_a_cases_kernel_arguments():
    from kbench.tasks.task import get_task

    module = _module(BSA / "bsa_case.py")
    # the submission loaded in a process of its own: loaded here, its Triton kernels would stay
    # bound to this process's (non-interpreter) mode for the interpreted tests that follow
    printed = subprocess.run(
        [sys.executable, "-c", ("from kbench.tasks.interface import load_module; import sys; "
                                "print(repr(load_module(sys.argv[1], 'sub').QK_SCALE))"),
         str(ROOT / "submissions" / "block_sparse_attn" / "submission.py")],
        capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert module.QK_SCALE == float(printed)
    task = get_task("block_sparse_attn")
    case = task.suite("smoke").cases[0]
    assert module.find_case(task, case.name) is case
    q, k, v, row_ptr, col_idx, seq_lens = module.kernel_inputs(task, case, "cpu")
    inputs = task.module.generate(dict(case.params, seed=case.seed), "cpu")
    assert all(a.equal(inputs[n]) for a, n in zip((q, k, v, row_ptr, col_idx, seq_lens),
                                                  ("q", "k", "v", "row_ptr", "col_idx", "seq_lens"), strict=True))


@pytest.mark.parametrize("folder", [BSA, MLA], ids=["block_sparse_attn", "mla_decode"])
def test_call_median_drops_the_warm_up_calls_and_takes_the_median(folder):
    module = _module(folder / "call_median.py")

    class Timer:   # device times 100, 90 (the warm-ups), then 5, 1, 3
        def __init__(self):
            self.times, self.prepared = [100.0, 90.0, 5.0, 1.0, 3.0], []

        def timed(self, fn, prepare, inputs):
            self.prepared.append(prepare(inputs))
            return fn(inputs), SimpleNamespace(device_ms=self.times.pop(0))

    timer = Timer()
    assert module.median_ms(timer, lambda d: (d["x"],), {"x": 1}, calls=3) == pytest.approx(3.0)
    assert timer.times == [] and timer.prepared == [{"x": 1}] * 5   # the same inputs every call by default
    timer = Timer()
    assert module.median_ms(timer, lambda d: (d,), {"x": 1}, calls=3, prepare=lambda d: {"x": 2}) == pytest.approx(3.0)
    assert timer.prepared == [{"x": 2}] * 5


def test_mla_decode_precision_runs_its_model_of_the_kernel_from_the_repository_root():
    proc = subprocess.run([sys.executable, str((MLA / "mla_decode_precision.py").relative_to(ROOT)),
                           "--model", "qlat=bf16;qlat=fp32", "--seeds", "2", "--cases", "b3_h4_ctx300"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("b3_h4_ctx300 (2 seeds,")
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["qlat=bf16,p=fp32,o=bf16,v=bf16",
                                                                  "qlat=fp32,p=fp32,o=bf16,v=bf16"]
    assert all("0/2 calls fail" in line for line in lines[1:])


def test_mla_decode_precision_refuses_its_cpu_model_on_the_gpu():
    proc = subprocess.run([sys.executable, str((MLA / "mla_decode_precision.py").relative_to(ROOT)),
                           "--model", "qlat=bf16", "--device", "cuda"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("--model is a CPU model of the kernel: leave out --device")
