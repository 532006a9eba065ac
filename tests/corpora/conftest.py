import pytest

from kbench.run import workers


@pytest.fixture(autouse=True)
def _next_worker_warm():
    """Each corpus test starts the next one's worker (kbench/run/workers.py), which imports torch
    meanwhile: most of these tests are one short run each, whose worker's start-up would be most of it."""
    workers.keep_warm(2)
