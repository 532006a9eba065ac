"""kbench compare: verdicts from both spreads, the geomean interval, exit codes, JSON round trip."""
import json
import math
import random

import pytest
from click.testing import CliRunner

from kbench.cli.commands import cli
from kbench.errors import KbenchError
from kbench.run.records import widen_by_process_spread
from kbench.stats.compare import compare_cases, compare_interleaved, compare_runs, ratio_interval, regressed, verdict
from kbench.stats.estimates import pool
from tests.helpers import FIXTURES, ROOT


@pytest.mark.parametrize("lo, hi, expected", [
    (0.90, 0.999, "FASTER"), (1.001, 1.10, "SLOWER"), (0.99, 1.01, "SAME"),
    (0.98, 1.02, "SAME"), (0.979, 1.01, "UNSURE"), (0.90, 1.10, "UNSURE"), (1.0, 1.0, "SAME"),
])
def test_verdict_edges(lo, hi, expected):
    assert verdict(lo, hi) == expected


def test_ratio_interval_widens_with_noise():
    r, lo, hi = ratio_interval(10.0, 0.0, 12.0, 0.0)
    assert (r, lo, hi) == (1.2, 1.2, 1.2)
    r, lo, hi = ratio_interval(10.0, 0.01, 10.0, 0.01)
    assert r == 1.0 and math.isclose(hi, math.exp(1.96 * math.sqrt(2) * 0.01))
    assert math.isclose(lo * hi, 1.0)


def test_a_1_percent_difference_inside_the_noise_is_not_called_faster():
    out = compare_cases([("c", ("passed", 10.0, 0.01), ("passed", 9.9, 0.01))])
    assert out["rows"][0]["verdict"] == "UNSURE"
    out = compare_cases([("c", ("passed", 10.0, 0.001), ("passed", 9.5, 0.001))])
    assert out["rows"][0]["verdict"] == "FASTER"


def test_a_difference_the_runs_processes_cannot_resolve_is_never_a_verdict():
    # Six cases, B 1% slower on each. Where each case's two processes sit ~1.5% apart (SD) the
    # runs' own spread holds the 1% move: no case is called. Where they agree within 0.05% the
    # same move is a verdict on every case. Nothing is assumed: the spread is the runs' own.
    def run(scale, spread, seed):
        rng = random.Random(seed)
        records = []
        for i in range(6):
            groups = []
            for _ in range(2):
                median = 0.010 * scale * (1 + i / 10) * math.exp(rng.gauss(0, spread))
                groups.append([median * (1 + 1e-4 * (j - 20) / 20) for j in range(41)])
            fig = pool(groups)
            s = fig.summary
            records.append({"case": f"c{i}", "params": {"i": i}, "status": "passed", "latency_ms": s.median,
                            "noise": s.noise, "process_ids": [0, 1],
                            "latency_by_process_ms": [p.median for p in fig.per_process]})
        widen_by_process_spread(records)
        return {"task": "qknorm", "suite": "full", "device": {"name": "H100"}, "cases": records,
                "timing": {"mode": "cuda-events", "meaningful": True, "processes": 2, "pool": 2}}

    loud = compare_runs(run(1.0, 0.015, 1), run(1.01, 0.015, 2))
    assert not [r for r in loud["rows"] if r["verdict"] in ("FASTER", "SLOWER")], loud["rows"]
    assert loud["summary"]["verdict"] == "UNSURE"
    quiet = compare_runs(run(1.0, 0.0005, 1), run(1.01, 0.0005, 2))
    assert [r["verdict"] for r in quiet["rows"]] == ["SLOWER"] * 6
    assert quiet["summary"]["verdict"] == "SLOWER"
    assert quiet["summary"]["intervals_together"] == 7


def test_saved_runs_with_the_same_baseline_cancel_drift_between_runs():
    # Run B is 3% slower across the board, the baseline timed beside it too: the card was
    # slower, not the kernel.
    control = {"c": ((0.020, 0.001), (0.0206, 0.001))}
    out = compare_cases([("c", ("passed", 0.010, 0.001), ("passed", 0.0103, 0.001))], control)
    assert out["rows"][0]["ratio"] == 1.0 and out["rows"][0]["baseline_drift"] == 1.03
    assert out["rows"][0]["verdict"] in ("SAME", "UNSURE")


def test_geomean_interval_and_failures():
    out = compare_cases([("a", ("passed", 10.0, 0.001), ("passed", 20.0, 0.001)),
                         ("b", ("passed", 10.0, 0.001), ("passed", 5.0, 0.001)),
                         ("c", ("passed", 10.0, 0.001), ("error", None, None))])
    s = out["summary"]
    assert s["geomean_ratio"] == 1.0 and s["compared"] == 2 and s["failed"] == 1
    assert s["geomean_ratio_ci95"][0] < 1.0 < s["geomean_ratio_ci95"][1]
    assert out["rows"][2]["verdict"] == "FAILED"


def test_regressed_needs_significance_beyond_the_threshold():
    slower = compare_cases([("a", ("passed", 10.0, 0.001), ("passed", 11.0, 0.001))])
    assert regressed(slower, 3.0)            # 10% slower, tight interval: a regression at 3%
    assert regressed(slower, 10.0) == []     # but not at 10%
    noisy = compare_cases([("a", ("passed", 10.0, 0.05), ("passed", 11.0, 0.05))])
    assert regressed(noisy, 3.0) == []       # 10% inside the noise is not evidence
    broken = compare_cases([("a", ("passed", 10.0, 0.001), ("mismatch", None, None))])
    assert regressed(broken, 50.0) == ["a: B mismatch"]


def _saved(tmp_path, name, ms, noise=0.001, status="passed", meaningful=True):
    run = {"task": "qknorm", "suite": "quick", "device": {"name": "H100"},
           "timing": {"mode": "cuda-events", "meaningful": meaningful, "processes": 2},
           "cases": [{"case": f"c{i}", "params": {"batch": i}, "status": status,
                      "latency_ms": m if status == "passed" else None, "noise": noise}
                     for i, m in enumerate(ms)]}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(run))
    return path


def test_cli_compare_saved_results_and_fail_if_slower(tmp_path):
    a = _saved(tmp_path, "a", [0.010, 0.020])
    b = _saved(tmp_path, "b", [0.011, 0.022])
    result = CliRunner().invoke(cli, ["compare", str(a), str(b)])
    assert result.exit_code == 0
    row = next(l for l in result.output.splitlines() if l.startswith("c0 "))
    # the interval: each median's 0.1% noise (which holds the spread between its processes), one
    # of three that hold together (two cases and the geomean): 2.39 standard errors each way
    assert row.split() == ["c0", "10.00", "11.00", "1.100", "1.096-1.104", "SLOWER"]
    assert "B/A geomean time 1.100" in result.output and "SLOWER" in result.output
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--fail-if-slower", "3"])
    assert result.exit_code == 1 and "regression: geomean 1.100x" in result.output
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--fail-if-slower", "10"])
    assert result.exit_code == 0


def test_compare_warns_when_a_side_was_timed_on_a_throttled_card(tmp_path):
    runs = []
    for name, clocks in (("a", [1967, 1970]), ("b", [1970, 1595])):
        run = json.loads(_saved(tmp_path, name, [0.010, 0.020]).read_text())
        run["device"]["clocks_max_sm"] = "1980 MHz"
        for case, mhz in zip(run["cases"], clocks):
            case["sm_clock_mhz"] = mhz
        runs.append(run)
    warnings = compare_runs(*runs)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("B was timed on a throttled card")
    assert "1 case(s): c1;" in warnings[0]
    path = tmp_path / "b.json"
    path.write_text(json.dumps(runs[1]))
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "a.json"), str(path)])
    assert result.exit_code == 0 and "B was timed on a throttled card" in result.output
    # one run with A in the baseline's place: A's clock is the baseline's
    case = {"case": "c", "status": "passed", "latency_ms": 0.01, "noise": 0.001, "reason": "",
            "baseline_status": "passed", "baseline_latency_ms": 0.01, "baseline_noise": 0.001,
            "sm_clock_mhz": 1970, "baseline_sm_clock_mhz": 1400}
    out = compare_interleaved({"cases": [case], "timing": {"meaningful": True},
                               "device": {"clocks_max_sm": "1980 MHz"}})
    assert [w[:31] for w in out["warnings"]] == ["A was timed on a throttled card"]
    older = compare_runs(json.loads((tmp_path / "a.json").read_text()), runs[0])
    assert older["warnings"] == []   # no maximum known, or no clock recorded: nothing said


def test_saved_runs_are_not_divided_by_their_baselines_unless_asked(tmp_path):
    # The submission held still; the baseline beside it moved 4% (FlexAttention does, between
    # processes). By default the table says SAME-ish and shows the baseline's drift; with
    # --normalize the baseline's move is divided out and shows up as a 4% gain.
    runs = []
    for name, base in (("a", 0.300), ("b", 0.288)):
        run = json.loads(_saved(tmp_path, name, [0.100]).read_text())
        run["cases"][0].update(baseline="flex", baseline_latency_ms=base, baseline_noise=0.001)
        runs.append(run)
    plain = compare_runs(*runs)
    row = plain["rows"][0]
    assert row["ratio"] == 1.0 and row["baseline_drift"] == 0.96 and plain["summary"]["normalized_by"] is None
    normalized = compare_runs(*runs, normalize=True)
    assert normalized["rows"][0]["ratio"] == round(1 / 0.96, 4) and normalized["summary"]["normalized_by"] == "flex"
    del runs[1]["cases"][0]["baseline_latency_ms"]
    with pytest.raises(KbenchError, match="--normalize needs the same baseline"):
        compare_runs(*runs, normalize=True)


def test_a_geomean_carries_the_offset_a_process_gives_all_its_cases(tmp_path):
    # Twenty cases, each 1.5% slower in B with a tight interval of its own: a per-case average
    # would shrink the uncertainty by sqrt(20), but a worker process's offset moves every case
    # at once (~1% per process on the H100), so the geomean is not called SLOWER on that.
    a = _saved(tmp_path, "a", [0.010] * 20)
    b = _saved(tmp_path, "b", [0.01015] * 20)
    s = compare_runs(json.loads(a.read_text()), json.loads(b.read_text()))["summary"]
    assert s["geomean_ratio"] == 1.015 and s["geomean_ratio_ci95"][0] < 1.0 < s["geomean_ratio_ci95"][1]
    # one process per side: the shared part is sqrt(2) larger
    one = json.loads(b.read_text())
    one["timing"]["processes"] = 1
    wider = compare_runs(json.loads(a.read_text()), one)["summary"]
    assert wider["geomean_log_se"] > s["geomean_log_se"]


def test_a_result_saved_without_the_processes_spread_is_refused(tmp_path):
    a = _saved(tmp_path, "a", [0.010])
    old = json.loads(a.read_text())
    del old["timing"]["processes"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    result = CliRunner().invoke(cli, ["compare", str(a), str(tmp_path / "old.json")])
    assert result.exit_code == 2 and "saved by an older kbench" in result.output


def test_cli_compare_rejects_mismatched_results(tmp_path):
    a = _saved(tmp_path, "a", [0.010])
    other = json.loads(a.read_text())
    other["cases"][0]["params"] = {"batch": 99}
    (tmp_path / "o.json").write_text(json.dumps(other))
    result = CliRunner().invoke(cli, ["compare", str(a), str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "different parameters" in result.output
    (tmp_path / "bad.json").write_text("{}")
    result = CliRunner().invoke(cli, ["compare", str(a), str(tmp_path / "bad.json")])
    assert result.exit_code == 2 and "not a kbench JSON result" in result.output


def test_eval_json_round_trips_into_compare(tmp_path, monkeypatch):
    """A result written by eval is read back by compare, and the gate can fire on it: B is the
    same result with every time 10% higher (both marked as CUDA timings, which gate)."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run.json"
    args = ["--device", "cpu", "--min-samples", "2", "--max-samples", "2"]
    assert CliRunner().invoke(cli, ["eval", "submissions/qknorm", *args, "--json", str(out)]).exit_code == 0
    run = json.loads(out.read_text())
    for key in ("kbench_version", "task", "suite", "device", "timing", "cases", "summary"):
        assert key in run
    case = run["cases"][0]
    for key in ("params", "latency_ms", "latency_ci95_ms", "noise", "samples", "speedup", "host_ms",
                "baseline_status", "baseline_reason", "max_abs_err_at"):
        assert key in case
    run["timing"]["meaningful"] = True
    for c in run["cases"]:
        c["noise"] = 0.001
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run))
    for c in run["cases"]:
        c["latency_ms"] *= 1.10
    b.write_text(json.dumps(run))
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--fail-if-slower", "3"])
    assert result.exit_code == 1, result.output
    assert "b3_q5_kv2_d64_f16" in result.output and "1.100" in result.output
    assert "regression: geomean 1.100x the time of A" in result.stderr
    assert CliRunner().invoke(cli, ["compare", str(a), str(a), "--fail-if-slower", "3"]).exit_code == 0


def test_cpu_timings_never_gate(tmp_path):
    """kbench compare X X --fail-if-slower 3 on CPU: B's CPU-mode times 20% higher with tight
    intervals are still no evidence; the statuses alone are judged, and compare says so."""
    a = _saved(tmp_path, "a", [0.010, 0.020, 0.030], meaningful=False)
    b = _saved(tmp_path, "b", [0.012, 0.024, 0.036], meaningful=False)
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--fail-if-slower", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == ("B passed 3/3, A 3/3; CPU mode: timings not meaningful, "
                                              "only statuses judged (--fail-if-slower too)")
    assert result.stdout.splitlines()[0].split() == ["case", "A", "B"]
    assert "SLOWER" not in result.stdout and "1.200" not in result.stdout
    broken = _saved(tmp_path, "c", [0.010, 0.020, 0.030], status="mismatch", meaningful=False)
    result = CliRunner().invoke(cli, ["compare", str(a), str(broken), "--fail-if-slower", "3"])
    assert result.exit_code == 1 and "regression: c0: B mismatch" in result.stderr


def test_twenty_cases_do_not_raise_twenty_chances_of_a_false_alarm():
    """Same code, 20 cases, noise only: the gate fires on about 5% of comparisons at most, and a
    verdict falls on some case about as rarely, not on the 1 - 0.95^20 = 64% that twenty separate
    95% intervals give (seeded, deterministic)."""
    rng = random.Random(12)
    fired = called = per_case = 0
    trials = 400
    spread = 0.002  # what each median's interval says, drawn as such
    for _ in range(trials):
        pairs = []
        for i in range(20):
            a, b = (0.010 * math.exp(rng.gauss(0, spread)) for _ in "ab")
            pairs.append((f"c{i}", ("passed", a, 0.002), ("passed", b, 0.002)))
        out = compare_cases(pairs)
        fired += bool(regressed(out, 0.0))
        called += any(r["verdict"] in ("FASTER", "SLOWER") for r in out["rows"])
        per_case += any(abs(math.log(r["ratio"])) > 1.96 * r["log_se"] for r in out["rows"])
    assert fired / trials <= 0.06, fired
    assert called / trials <= 0.06, called
    assert per_case / trials > 0.4, per_case  # what separate 95% intervals would have done


def test_one_slow_case_of_twenty_needs_evidence_beyond_the_family():
    # 1% noise per side: a figure of a few microseconds from one process
    rows = [(f"c{i}", ("passed", 10.0, 0.01), ("passed", 10.0, 0.01)) for i in range(19)]
    # 6% slower: called SLOWER, and alone its 95% interval would clear 1.03 (a per-case rule
    # fires) but not by a margin that survives 21 comparisons
    marginal = compare_cases(rows + [("slow", ("passed", 10.0, 0.01), ("passed", 10.6, 0.01))])
    assert marginal["rows"][-1]["verdict"] == "SLOWER"
    assert math.log(1.06 / 1.03) > 1.96 * marginal["rows"][-1]["log_se"]
    assert regressed(marginal, 3.0) == []
    clear = compare_cases(rows + [("slow", ("passed", 10.0, 0.01), ("passed", 13.0, 0.01))])
    assert regressed(clear, 3.0)[0].startswith("slow: 1.300x the time of A, p=")


def test_help_states_the_family_wise_rule():
    text = " ".join(CliRunner().invoke(cli, ["compare", "--help"]).output.split())
    assert "95% family-wise confidence: Holm's step-down over the geomean and every case" in text


def test_a_saved_result_against_a_folder_of_another_task_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    saved = _saved(tmp_path, "q", [0.010])
    for args in ([str(saved), "submissions/mla_decode"], ["submissions/mla_decode", str(saved)]):
        result = CliRunner().invoke(cli, ["compare", *args])
        assert result.exit_code == 2
        assert result.stderr == f"Error: submissions/mla_decode is a mla_decode submission but {saved} is a qknorm result\n"
    result = CliRunner().invoke(cli, ["compare", str(saved), "submissions/qknorm", "--task", "mla_decode"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: --task mla_decode, but")


def test_compare_markdown_keeps_the_summary_out_of_the_table_and_ends_with_a_newline(tmp_path):
    a = _saved(tmp_path, "a", [0.010, 0.020])
    b = _saved(tmp_path, "b", [0.011, 0.022])
    md = tmp_path / "summary.md"
    md.write_text("before\n")
    assert CliRunner().invoke(cli, ["compare", str(a), str(b), "--markdown", str(md)]).exit_code == 0
    text = md.read_text()
    assert text.startswith("before\n### kbench compare: ") and text.endswith("\n")
    lines = text.splitlines()
    last_row = max(i for i, line in enumerate(lines) if line.startswith("|"))
    assert lines[last_row + 1] == "" and lines[last_row + 2].startswith("B/A geomean time 1.100")


def test_compare_reads_the_baselines_status_from_its_fields():
    """A folder compared with a folder: A ran in the baseline's place; its status and reason are
    fields of the case record, whatever the prose note says."""
    case = {"case": "c", "status": "passed", "latency_ms": 0.01, "noise": 0.001, "reason": "",
            "baseline_status": "timeout", "baseline_reason": "no answer after 3 s",
            "baseline_problem": "baseline a/b: c: d passed: misleading prose"}
    out = compare_interleaved({"cases": [case], "timing": {"meaningful": True}})
    row = out["rows"][0]
    assert (row["a_status"], row["a_reason"], row["verdict"]) == ("timeout", "no answer after 3 s", "FAILED")


def test_compare_two_folders_runs_them_interleaved_and_says_why_b_failed(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["compare", str(FIXTURES / "qknorm" / "good_torch"),
                                      str(FIXTURES / "qknorm" / "fails_one_case"), "--task", "qknorm",
                                      "--device", "cpu", "--min-samples", "2", "--max-samples", "2"])
    assert result.exit_code == 1
    row = next(l for l in result.output.splitlines() if l.startswith("b2_q3_kv1_d256_bf16 "))
    assert row.split()[-3:] == ["not", "run", "error"]
    assert "b2_q3_kv1_d256_bf16: B error: RuntimeError: unsupported head_dim (at submission.py:7)" in result.stdout
    assert "regression: b2_q3_kv1_d256_bf16: B error" in result.stderr


def test_compare_two_folders_says_why_a_failed(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["compare", str(FIXTURES / "qknorm" / "raises"),
                                      str(FIXTURES / "qknorm" / "good_torch"), "--task", "qknorm",
                                      "--device", "cpu", "--case", "b3_q5_kv2_d64_f16", "--normalize"])
    assert result.exit_code == 0  # B passed everything: A's failure is not B's
    assert "b3_q5_kv2_d64_f16: A error: ValueError: kernel exploded (at submission.py:2)" in result.stdout
    assert result.stderr == "kbench: --normalize ignored: it takes two saved results\n"


def test_run_options_with_two_saved_results_are_said_to_be_ignored(tmp_path):
    a, b = _saved(tmp_path, "a", [0.010]), _saved(tmp_path, "b", [0.010])
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--suite", "full", "--budget", "3", "-q"])
    assert result.exit_code == 0
    assert result.stderr == "kbench: ignored with two saved results (nothing is run): --suite, --budget\n"
    assert CliRunner().invoke(cli, ["compare", str(a), str(b)]).stderr == ""


def test_a_pool_of_processes_narrows_the_geomean_only_once_the_cases_go_round_it():
    from kbench.stats.compare import _processes
    run = {"timing": {"processes": 2, "pool": 4}, "cases": [{}] * 20}
    assert _processes(run) == 4
    assert _processes({**run, "cases": [{}]}) == 2          # one case: two processes timed it
    assert _processes({"timing": {"processes": 2}, "cases": [{}] * 5}) == 2   # saved before pools
    assert _processes({"timing": {"processes": 8, "pool": 8}, "cases": [{}] * 3}) == 8


def _pooled_run(scale: float, offsets: list[float], cases: int = 20) -> dict:
    """A saved run whose pool processes (two a case, kbench's rotation) sit at ``offsets``."""
    pool = len(offsets)
    records = []
    for i in range(cases):
        ids = [(2 * i) % pool, (2 * i + 1) % pool]
        ms = 0.005 * (1 + i / 50) * scale
        by_process = [ms * math.exp(offsets[p]) for p in ids]
        records.append({"case": f"c{i}", "params": {"i": i}, "status": "passed", "latency_ms": sum(by_process) / 2,
                        "noise": 0.003, "process_ids": ids, "latency_by_process_ms": by_process})
    return {"task": "qknorm", "suite": "full", "device": {"name": "H100"}, "cases": records,
            "timing": {"mode": "cuda-events", "meaningful": True, "processes": 2, "pool": pool}}


def test_a_geomean_holds_the_offsets_its_own_processes_show():
    from kbench.stats.compare import process_offset
    from kbench.stats.estimates import PROCESS_REL

    # processes within 0.2-0.4% of each other: that is the spread; every case shows the same four
    # lasting offsets, so twenty cases read it with the few degrees of freedom four processes give
    quiet = _pooled_run(1.0, [0.001, -0.001, 0.002, -0.002])
    spread, df = process_offset(quiet)
    assert 0.001 < spread < 0.004 and 1 <= df <= 3
    # processes 6% apart in every pair, as a multi-launch eager kernel's can be: the geomean's
    # interval must hold that
    loud_a = _pooled_run(1.0, [0.03, -0.03, -0.03, 0.03])
    loud_b = _pooled_run(1.03, [-0.03, 0.03, 0.03, -0.03])
    assert process_offset(loud_a)[0] == pytest.approx(math.sqrt(2) * 0.03, rel=0.01)   # from (6%)^2 / 2 a pair
    s = compare_runs(loud_a, loud_b)["summary"]
    assert s["geomean_ratio"] == pytest.approx(1.03, abs=0.002)
    assert s["geomean_ratio_ci95"][0] < 1.0 and s["verdict"] == "UNSURE"
    assert s["process_offset_pct"] == [pytest.approx(4.24, abs=0.01)] * 2
    # the same 3% with quiet processes is a verdict
    assert compare_runs(quiet, _pooled_run(1.03, [0.001, -0.001, 0.002, -0.002]))["summary"]["verdict"] == "SLOWER"
    # a run of one process a case cannot show it: the floor, taken as known
    single = {"cases": [{"case": "c", "process_ids": [0], "latency_by_process_ms": [0.005]}]}
    assert process_offset(single) == (PROCESS_REL, None)


def test_a_process_offset_is_not_read_from_one_process_case_to_case_scatter():
    from kbench.stats.spread import fit_offsets as fit
    from kbench.stats.spread import offset_cells as cells
    from kbench.stats.spread import offset_variance

    # a pool of 8 without lasting offsets, each process 5% either way case by case (SD): five
    # cases a process leave (5%)^2 / 5 in a raw reading of its offsets; the scatter is taken
    # out (30 seeded runs: a single run's reading has only 4 degrees of freedom)
    rng = random.Random(3)
    raw, corrected = [], []
    for _ in range(30):
        run = _pooled_run(1.0, [0.0] * 8)
        for c in run["cases"]:
            c["latency_by_process_ms"] = [m * math.exp(rng.gauss(0, 0.05)) for m in c["latency_by_process_ms"]]
        f = fit(cells(run["cases"]))
        raw.append(sum(v * v for v in f.offsets.values()) / 4)
        variance, df = offset_variance(cells(run["cases"]))
        corrected.append(variance)
        assert df == 4
    assert sum(raw) / 30 == pytest.approx(0.05 ** 2 / 5, rel=0.35)
    assert sum(corrected) / 30 < sum(raw) / 30 / 3


def test_processes_of_different_cards_are_different_processes():
    from kbench.stats.spread import offset_cells as cells

    # --gpus numbers each child's pool from 0: process 0 on cuda:0 is not process 0 on cuda:1
    records = [{"gpu": gpu, "process_ids": [0, 1], "latency_by_process_ms": [0.005, 0.0051]}
               for gpu in ("cuda:0", "cuda:1")]
    assert {p for _, p, _ in cells(records)} == {("cuda:0", 0), ("cuda:0", 1), ("cuda:1", 0), ("cuda:1", 1)}


def test_different_cuda_connections_are_warned_about(tmp_path):
    # Fewer connections serialize a multi-stream kernel's streams: its times then differ for that
    # reason alone, so the comparison says so (an older result without the field counts as the default).
    a = json.loads(_saved(tmp_path, "a", [0.010]).read_text())
    b = json.loads(_saved(tmp_path, "b", [0.010]).read_text())
    a["timing"].pop("cuda_connections", None)
    b["timing"]["cuda_connections"] = None
    assert not any("CONNECTIONS" in w for w in compare_runs(a, b)["warnings"])
    b["timing"]["cuda_connections"] = 1
    assert compare_runs(a, b)["warnings"] == [
        ("different CUDA_DEVICE_MAX_CONNECTIONS in the workers: CUDA's default vs 1 "
        "(a multi-stream kernel's overlap differs, and whether a stream race shows)")]


def test_runs_in_different_environments_are_warned_about(tmp_path):
    # A variable the workers inherit (not one kbench removes) that may bear on a kernel: two
    # results from different shells are told apart; an older result without the record is not.
    a = json.loads(_saved(tmp_path, "a", [0.010]).read_text())
    b = json.loads(_saved(tmp_path, "b", [0.010]).read_text())
    a["timing"]["environment_passed_on"] = {"TRITON_OVERRIDE_ARCH": "sm80", "OMP_NUM_THREADS": "4"}
    b["timing"]["environment_passed_on"] = {"NVIDIA_TF32_OVERRIDE": "0", "OMP_NUM_THREADS": "4"}
    assert compare_runs(a, b)["warnings"] == [
        "the workers' environments differ: NVIDIA_TF32_OVERRIDE (unset) vs 0; TRITON_OVERRIDE_ARCH sm80 vs (unset)"]
    b["timing"]["environment_passed_on"] = dict(a["timing"]["environment_passed_on"])
    assert compare_runs(a, b)["warnings"] == []
    del b["timing"]["environment_passed_on"]
    assert compare_runs(a, b)["warnings"] == []


@pytest.mark.parametrize("given, expected", [([], 1), (["--cuda-connections", "4"], 4)])
def test_a_run_compared_with_a_saved_result_takes_its_cuda_connections(tmp_path, monkeypatch, given, expected):
    # Like with like, as with the suite and the seed: the fresh run uses the saved run's
    # connections unless the command gives its own.
    from kbench import api

    saved = json.loads(_saved(tmp_path, "a", [0.010]).read_text())
    saved["timing"]["cuda_connections"] = 1
    path = tmp_path / "a.json"
    path.write_text(json.dumps(saved))
    seen = []

    def fake_evaluate(submission, *, task=None, notices=None, **settings):
        seen.append(settings["cuda_connections"])
        raise KbenchError("stop here")

    monkeypatch.setattr(api, "resolve_device", lambda requested="auto", notices=None: "cuda")
    monkeypatch.setattr(api, "evaluate", fake_evaluate)
    result = CliRunner().invoke(cli, ["compare", str(path), str(ROOT / "submissions" / "qknorm"), *given])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen == [expected]
