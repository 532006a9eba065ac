"""bench/suite_health.py on CPU: the command line over kbench.tasks.suites' exact-answer check
(tests/test_suite_health.py checks the suites themselves)."""
import subprocess
import sys

import pytest

from tests.helpers import ROOT


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/suite_health.py", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)


def test_every_case_of_the_smoke_suite_gets_its_count_of_failing_seeds():
    from kbench.tasks.task import get_task

    proc = _run("qknorm", "smoke", "--seeds", "3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[2].rstrip(":") for line in lines] == [c.name for c in get_task("qknorm").suite("smoke").cases]
    assert all(" 0/3 seeds fail (" in line for line in lines)


def test_one_case_by_name():
    proc = _run("mla_decode", "smoke", "--seeds", "2", "--case", "b3_h4_ctx300")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("mla_decode smoke b3_h4_ctx300: 0/2 seeds fail (")


@pytest.mark.parametrize("args, says", [
    (("qknorm", "smoke", "--case", "nope"), "no case 'nope' in suite 'smoke'"),
    (("qknorm", "smok"), "unknown suite 'smok'"),
    (("qknrm", "smoke"), "unknown task 'qknrm'"),
])
def test_a_name_it_does_not_know_is_one_line_and_exit_2(args, says):
    proc = _run(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("suite_health: ") and says in proc.stderr and proc.stderr.count("\n") == 1
