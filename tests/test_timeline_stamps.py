"""The timeline scripts stamp a copy of each bundled Gluon kernel by matching its text exactly: a kernel
change that moves a matched line breaks them, which used to show only on the GPU (twenty-eighth
session: bench/bsa_timeline.py after the producer's publish moved). These run on the CPU."""
import ast
import importlib
import sys

import pytest

from tests.helpers import ROOT

CASES = [  # script, kernel, the stamps it inserts
    ("bsa_timeline", "submissions/block_sparse_attn/bsa_gluon.py", 13),
    ("mla_timeline", "submissions/mla_decode/mla_decode_gluon.py", 10),
]


@pytest.fixture
def bench_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the scripts import kernel_stamps from their folder


@pytest.mark.parametrize("script, kernel, stamps", CASES)
def test_the_timeline_script_stamps_the_bundled_kernel(bench_path, script, kernel, stamps):
    module = importlib.import_module(script)
    source = (ROOT / kernel).read_text()
    out = module.stamped(source)
    ast.parse(out)
    assert out.count("%globaltimer") == stamps
    assert out.replace(" ", "") != source.replace(" ", "")


def test_a_kernel_whose_lines_moved_fails_with_the_line_named(bench_path):
    module = importlib.import_module("bsa_timeline")
    source = (ROOT / "submissions/block_sparse_attn/bsa_gluon.py").read_text()
    with pytest.raises(SystemExit, match="bsa_timeline: line not found once in the kernel: .*if i == take_a"):
        module.stamped(source.replace("            if i == take_at:", "            if take_at == i:"))


def test_a_publish_call_written_otherwise_fails_with_the_line_named(bench_path):
    module = importlib.import_module("bsa_timeline")
    source = (ROOT / "submissions/block_sparse_attn/bsa_gluon.py").read_text()
    moved = source.replace("z0, z1, z2, z3, T_MAX)\n", "z0, z1, z2, z3,\n                         T_MAX)\n")
    assert moved != source
    with pytest.raises(SystemExit, match="bsa_timeline: line not found once in the kernel: '_publish"):
        module.stamped(moved)
