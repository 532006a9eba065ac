"""Native scores: every task returns kbench.tasks.check's one shape, passed or failed."""
import pytest

from kbench.errors import KbenchError
from kbench.tasks import check
from kbench.tasks.task import get_task


def _records(task_name: str, status: str = "passed") -> list[dict]:
    """Case records as the runner writes them, on the task's own full suite."""
    out = []
    for i, case in enumerate(get_task(task_name).suite("full").cases):
        passed = status == "passed" or i > 0   # the first case fails when asked to
        out.append({"case": case.name, "params": dict(case.params), "status": "passed" if passed else status,
                    "latency_ms": 0.01 * (i + 1) if passed else None, "speedup": 1.5 if passed else None,
                    "baseline": "flashinfer" if passed else None})
    return out


@pytest.mark.parametrize("task_name", ["qknorm", "mla_decode", "block_sparse_attn"])
def test_every_task_scores_in_the_one_shape(task_name):
    score_of = get_task(task_name).module.native_score
    passed = check.validate_score(score_of(_records(task_name), "full"), task_name)
    assert passed["value"] is not None and passed["value"] > 0 and passed["reason"] is None
    failed = check.validate_score(score_of(_records(task_name, "mismatch"), "full"), task_name)
    assert failed["reason"] and failed["value"] in (None, 0.0)
    assert failed["name"] == passed["name"] and failed["unit"] == passed["unit"]


def test_a_failed_case_is_named_in_the_reason():
    failed = get_task("block_sparse_attn").module.native_score(_records("block_sparse_attn", "mismatch"), "full")
    first = get_task("block_sparse_attn").suite("full").cases[0].name
    assert failed["reason"] == f"any failure invalidates the run (case {first} mismatch)"


@pytest.mark.parametrize("bad, message", [
    ({"score": 1.0, "score_unbounded": 2.0}, "task t: native_score returned keys ['score', 'score_unbounded']: "
                                             "missing ['details', 'lower_is_better', 'name', 'reason', 'unit', "
                                             "'value'], unknown ['score', 'score_unbounded'] (use kbench.tasks.check.score)"),
    ([1.0], "task t: native_score returned list, expected kbench.tasks.check.score(...)"),
    ({**check.score("s", 1.0, unit="ms", lower_is_better=True), "value": "fast"}, "task t: native_score: value is str"),
])
def test_other_shapes_are_refused_with_one_line(bad, message):
    with pytest.raises(KbenchError) as caught:
        check.validate_score(bad, "t")
    assert str(caught.value) == message


def test_a_gpu_run_record_carries_the_native_score_and_reports_it():
    # The GPU-only path of kbench/run/records.py, run on made-up case records (no GPU needed).
    from kbench.cli.report import text_report
    from kbench.run.records import case_record, run_record
    from kbench.run.runner import Options
    from kbench.stats.estimates import summarize

    task = get_task("qknorm")
    suite = task.suite("quick")
    records = [case_record(c, "passed", "", latency=summarize([0.004, 0.005, 0.006]), host=summarize([0.01]),
                           baseline="flashinfer", baseline_latency=summarize([0.008, 0.009, 0.010]))
               for c in suite.cases]
    run = run_record(task, suite, Options(device="cuda"), "sub", {"device": "cuda"}, records, [], None)
    assert run["summary"]["native"] == check.score("Frontier-CS score", 100.0, unit="points", lower_is_better=False,
                                                    score_unbounded=180.0)
    assert "Frontier-CS score" in text_report(run)


def test_the_report_prints_a_native_score_as_one_phrase():
    from kbench.cli.report import native_text
    from kbench.tasks.check import score
    assert native_text(score("Frontier-CS score", 100.0, unit="points", lower_is_better=False,
                             score_unbounded=148.6)) == "Frontier-CS score 100 points [score_unbounded 148.6]"
    assert native_text(score("family geomean latency", None, unit="ms", lower_is_better=True,
                             reason="invalid: case quick-window-1 mismatch", families={"window": 0.3})) \
        == "family geomean latency n/a (invalid: case quick-window-1 mismatch)"
