"""mla_decode's launch path (submissions/mla_decode/mla_launch.py) on the CPU, with stand-ins for a JIT
function and its compiled kernel: what goes through the JIT, what through the launcher, and the key.
The launches themselves are checked on the GPU (test_mla_decode.py, direct launches)."""
import torch

from kbench.tasks.interface import load_module
from tests.helpers import ROOT

launch = load_module(ROOT / "submissions" / "mla_decode" / "mla_launch.py", "mla_launch_under_test")


class Compiled:
    """A compiled kernel whose launcher takes exactly ``takes`` kernel arguments."""
    function, packed_metadata = "f", "m"

    def __init__(self, takes: int):
        self.takes, self.runs = takes, []

    def run(self, gx, gy, gz, stream, function, metadata, launch_metadata, enter, exit_, *args):
        if len(args) != self.takes:
            raise TypeError(f"takes {self.takes} arguments")
        self.runs.append(((gx, gy, gz), args))


class Jit:
    def __init__(self, compiled):
        self.compiled, self.calls = compiled, []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            return self.compiled
        return run


def test_the_key_classes_integers_as_the_jit_specialises_them():
    assert launch.arg_class(1) == 1
    assert launch.arg_class(32) == launch.arg_class(4096) == 16
    assert launch.arg_class(33) == launch.arg_class(129) == 0
    assert launch.arg_class(2 ** 31) == "i64"
    assert launch.arg_class(True) is bool and launch.arg_class(0.5) is float
    t = torch.zeros(64, dtype=torch.bfloat16)
    assert launch.arg_class(t) == (torch.bfloat16, True)
    assert launch.arg_class(t[1:]) == (torch.bfloat16, False)   # 2 bytes past an aligned base


def test_a_specialisation_goes_through_the_jit_once_then_its_launcher(monkeypatch):
    monkeypatch.setattr(launch, "raw_stream", lambda device: 7)
    compiled = Compiled(takes=3)   # two runtime arguments and one constexpr
    jit, kernels, device = Jit(compiled), launch.Kernels(), torch.device("cpu")
    args, constexprs, options = (torch.zeros(8), 128), {"BLOCK": 64}, {"num_warps": 4}
    for _ in range(3):
        kernels.launch(jit, (2, 3), device, args, constexprs, options)
    assert len(jit.calls) == 1
    assert [r[0] for r in compiled.runs] == [(2, 3, 1), (2, 3, 1)]
    assert compiled.runs[0][1][1:] == (128, 64)
    # Another integer class (129: not a multiple of 16) is another specialisation: the JIT again.
    kernels.launch(jit, (2, 3), device, (torch.zeros(8), 129), constexprs, options)
    assert len(jit.calls) == 2


def test_a_launcher_that_takes_no_known_argument_count_leaves_the_jit_in_charge(monkeypatch):
    monkeypatch.setattr(launch, "raw_stream", lambda device: 7)
    compiled = Compiled(takes=99)
    jit, kernels = Jit(compiled), launch.Kernels()
    for _ in range(3):
        kernels.launch(jit, (1,), torch.device("cpu"), (1.5,), {"N": 2}, {})
    assert len(jit.calls) == 3 and not compiled.runs
