import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from tests import leftovers
from tests.leftovers import MARK


def pytest_configure(config):
    """A private TMPDIR for the session (tests/leftovers.py), marked in every process it starts."""
    private = tempfile.mkdtemp(prefix="kbench-tests-")
    os.environ["TMPDIR"] = private
    os.environ[MARK] = private
    tempfile.tempdir = private


def pytest_unconfigure(config):
    """The private TMPDIR goes at exit, after multiprocessing has removed its own folder in it."""
    from multiprocessing import util

    private = os.environ.get(MARK)
    if private and Path(private).name.startswith("kbench-tests-"):
        util.Finalize(None, shutil.rmtree, args=(private, True), exitpriority=-200)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """After every test (every fixture, every submission run): no new entry in TMPDIR and no
    process of this session still running, but this one and the spare workers kept on purpose."""
    before = leftovers.snapshot()
    yield
    left, procs = leftovers.since(before)
    assert not left, f"left in TMPDIR: {left}"
    assert not procs, f"processes left running: {procs}"
