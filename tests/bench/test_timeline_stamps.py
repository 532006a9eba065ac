"""The timeline probes stamp a copy of each bundled Gluon kernel by matching its text exactly: a kernel
change that moves a matched line breaks them, which would otherwise show only on the GPU. On the CPU."""
import ast
import importlib.util
import sys

import pytest

from tests.helpers import ROOT

BSA = ROOT / "bench" / "block_sparse_attn" / "bsa_timeline.py"
MLA = ROOT / "submissions" / "mla_decode" / "dev" / "mla_timeline.py"
CASES = [  # script, kernel, the stamps it inserts
    (BSA, "submissions/block_sparse_attn/bsa_gluon.py", 13),
    (MLA, "submissions/mla_decode/mla_decode_gluon.py", 10),
]


def _load(script, monkeypatch):
    """The script as a module, its folder first on sys.path for its kernel_stamps.py."""
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.delitem(sys.modules, "kernel_stamps", raising=False)
    spec = importlib.util.spec_from_file_location(f"{script.stem}_under_test", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delitem(sys.modules, "kernel_stamps", raising=False)
    return module


@pytest.mark.parametrize("script, kernel, stamps", CASES, ids=lambda x: getattr(x, "stem", None))
def test_the_timeline_script_stamps_the_bundled_kernel(monkeypatch, script, kernel, stamps):
    module = _load(script, monkeypatch)
    source = (ROOT / kernel).read_text()
    out = module.stamped(source)
    ast.parse(out)
    assert out.count("%globaltimer") == stamps
    assert out.replace(" ", "") != source.replace(" ", "")


def test_a_kernel_whose_lines_moved_fails_with_the_line_named(monkeypatch):
    module = _load(BSA, monkeypatch)
    source = (ROOT / "submissions/block_sparse_attn/bsa_gluon.py").read_text()
    with pytest.raises(SystemExit, match="bsa_timeline: line not found once in the kernel: .*if i == take_a"):
        module.stamped(source.replace("            if i == take_at:", "            if take_at == i:"))


def test_a_publish_call_written_otherwise_fails_with_the_line_named(monkeypatch):
    module = _load(BSA, monkeypatch)
    source = (ROOT / "submissions/block_sparse_attn/bsa_gluon.py").read_text()
    moved = source.replace("z0, z1, z2, z3, T_MAX)\n", "z0, z1, z2, z3,\n                         T_MAX)\n")
    assert moved != source
    with pytest.raises(SystemExit, match="bsa_timeline: line not found once in the kernel: '_publish"):
        module.stamped(moved)


def test_the_two_kernel_stamps_copies_are_the_same_code():
    def code(path):
        tree = ast.parse(path.read_text())
        tree.body = tree.body[1:]   # the docstring names its own script
        return ast.dump(tree)

    assert code(BSA.parent / "kernel_stamps.py") == code(MLA.parent / "kernel_stamps.py")
    assert code(BSA.parent / "call_median.py") == code(MLA.parent / "call_median.py")
