"""The honest corpus on a CUDA device (skipped without one): unusual but correct submissions
that must pass with no flag and no fatal error, on three quick cases that span both head
sizes, both kv-head counts and batch 1 to 256 (all six: twice the time for no new shape
class; torch.compile recompiles per shape)."""
import pytest

from kbench.run import workers
from kbench.run.runner import Options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, run_suite

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _next_worker_warm():
    """Each test starts the next test's worker (kbench/run/workers.py): it imports torch meanwhile."""
    workers.keep_warm(2)


HONEST = sorted(p.parent for p in (FIXTURES / "honest" / "qknorm").glob("*/submission.py"))
CASES = ("kv8_q32_d64_b256", "kv8_q32_d128_b1", "kv32_q32_d128_b256")


@pytest.mark.parametrize("path", HONEST, ids=[p.name for p in HONEST])
def test_honest_submission_passes_clean_on_gpu(path):
    task = get_task("qknorm")
    result = run_suite(task, path, Options(
        # pool=2, not qknorm's 8: flags and verdicts do not depend on it, and eight starts a test cost time
        suite="quick", only=CASES, device="cuda", baseline="none", timeout=120.0, calibrate=True, warmup_ms=5.0, pool=2,
        stop=StopRule(noise=0.02, min_samples=10, max_samples=30, budget_s=0.5)))
    assert result["summary"]["fatal"] is None, result["summary"]["fatal"]
    assert [c["case"] for c in result["cases"]] == list(CASES)
    bad = [(c["case"], c["status"], c["reason"], c["flags"]) for c in result["cases"]
           if c["status"] != "passed" or c["flags"]]
    assert not bad, bad
