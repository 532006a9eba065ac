"""The check run after every test (tests/conftest.py) sees what a test leaves behind."""
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import leftovers


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_the_check_after_every_test_sees_a_folder_and_a_process():
    before = leftovers.snapshot()
    folder = Path(tempfile.mkdtemp(prefix="kbench-worker-"))
    proc = subprocess.Popen(["sleep", "60"])
    try:
        left, procs = leftovers.since(before, wait=0.3)
        assert left == [folder.name]
        assert list(procs) == [proc.pid] and procs[proc.pid].startswith("sleep 60")
    finally:
        proc.kill()
        proc.wait()
        folder.rmdir()
    assert leftovers.since(before, wait=0) == ([], {})
