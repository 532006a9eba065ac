"""Shared test helpers: run kbench in-process on the CPU with small budgets."""
from pathlib import Path

from kbench.run.runner import Options, Runner
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def cpu_options(**kw) -> Options:
    defaults = dict(suite="smoke", device="cpu", baseline="none", timeout=60.0, calibrate=True,
                    stop=StopRule(noise=0.5, min_samples=2, max_samples=2, budget_s=0.5))
    defaults.update(kw)
    return Options(**defaults)


def run_cpu(task: str, path, **kw) -> dict:
    return run_suite(get_task(task), Path(path), cpu_options(**kw))


def statuses(run: dict) -> dict:
    return {c["case"]: c["status"] for c in run["cases"]}


def run_suite(task, path, options: Options) -> dict:
    """One submission on one suite, straight through the runner (kbench.evaluate without its checks)."""
    return Runner(task, options).run(Path(path))
