"""What eval reports: the worst error over every checked call, tables that fit 100 columns."""
from kbench.cli.report import markdown_report, summary_line, text_report
from kbench.stats.estimates import StopRule
from tests.helpers import FIXTURES, run_cpu

CASE = "b3_q5_kv2_d64_f16"


def test_the_error_columns_are_the_worst_over_every_checked_call():
    """The fixture is exact on its first call and 0.003 off on every later one (inside the
    tolerance): the first call's error, 0, is not the one reported."""
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "worse_later", only=(CASE,),
                  stop=StopRule(noise=0.5, min_samples=3, max_samples=3, budget_s=5))
    case = run["cases"][0]
    assert case["status"] == "passed", case["reason"]
    assert case["max_abs_err"] > 0.002, case["max_abs_err"]  # 0.003 off, give or take fp16 rounding
    assert case["max_abs_err_at"].startswith("timed call ") and "(seed " in case["max_abs_err_at"]
    assert case["max_rel_err"] > 0 and case["max_rel_err_at"].startswith("timed call ")
    row = next(line for line in text_report(run).splitlines() if line.startswith(CASE))
    assert row.split()[2:4] == [f"{case['max_abs_err']:.2g}", f"{case['max_rel_err']:.2g}"]
    assert row.split()[4:6] == ["timed", case["max_abs_err_at"].split()[2]]
    # --wide in CPU mode: the worst call in full with its seed, the calls checked, the parameters
    header, row = (line for line in text_report(run, wide=True).splitlines() if line.startswith(("case ", CASE)))
    assert header.split()[-2:] == ["checked", "params"]
    assert case["max_abs_err_at"] in row and f" {1 + case['samples']} " in row
    assert "batch=3 num_qo_heads=5 num_kv_heads=2 head_dim=64" in row and "not shown" not in row


def test_an_exact_submission_reports_zero_error_at_its_first_call():
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "good_torch", only=(CASE,))
    case = run["cases"][0]
    assert (case["max_abs_err"], case["max_abs_err_at"]) == (0.0, "first call")


def _gpu_run(names, gbps=None):
    """A run record as a CUDA run writes it (every field a row reads)."""
    cases = []
    for i, name in enumerate(names):
        cases.append({
            "case": name, "status": "passed", "reason": "", "flags": [], "max_abs_err": 0.0039,
            "max_rel_err": 0.0078, "max_abs_err_at": f"timed call {i + 7} (seed 1234567)",
            "latency_ms": 0.01234 * (i + 1), "latency_q1_ms": 0.0121, "latency_q3_ms": 0.0125,
            "host_ms": 0.0456, "baseline_latency_ms": 0.02345, "speedup": 1.9, "gbps": gbps,
            "pct_of_copy_bw": gbps and 42.0, "notes": []})
    return {"task": "qknorm", "suite": "models", "baseline": "flashinfer", "notes": [], "cases": cases,
            "timing": {"mode": "cuda-events", "meaningful": True}, "device": {"name": "NVIDIA H200"},
            "submission": "submissions/qknorm", "kbench_version": "0",
            "summary": {"passed": len(cases), "total": len(cases), "geomean_speedup": 1.9, "flagged": 0,
                        "native": None, "fatal": None}}


def test_a_gpu_table_fits_100_columns_and_says_what_it_left_out():
    names = ["4d_b4_s2048_q32_kv8_d128_bf16", "prefill16k_q32_kv8_d128_bf16"]
    run = _gpu_run(names, gbps=1234.5)
    text = text_report(run)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0].split()[:4] == ["case", "status", "abs", "err"]
    assert "time us" in lines[0] and "speedup" in lines[0]
    assert lines[-2].startswith("(not shown, to fit 100 columns: worst at") and "--wide shows them" in lines[-2]
    wide = text_report(run, wide=True)
    assert max(len(line) for line in wide.splitlines()) > 100
    assert "% bw" in wide.splitlines()[0] and "not shown" not in wide


def test_columns_without_a_figure_are_left_out():
    run = _gpu_run(["b3_q5_kv2_d64_f16"], gbps=None)   # no bandwidth measured
    header = text_report(run).splitlines()[0]
    assert "GB/s" not in header and "% bw" not in header and "speedup" in header
    assert "not shown" not in text_report(run)


def test_summary_line_on_cuda_has_the_geomean():
    assert summary_line(_gpu_run(["a"])) == "qknorm/models: passed 1/1; geomean speedup 1.900x vs flashinfer"


def test_summary_line_names_the_workers_cuda_connections():
    run = _gpu_run(["a"])
    run["timing"]["cuda_connections"] = 1
    assert summary_line(run) == ("qknorm/models: passed 1/1; geomean speedup 1.900x vs flashinfer; "
                                 "CUDA_DEVICE_MAX_CONNECTIONS=1 in the workers (streams may share a hardware "
                                 "queue: a missing wait between them can go unseen)")


def test_the_host_time_is_a_column_and_a_cases_notes_are_printed_under_the_table():
    run = _gpu_run(["a", "b", "c"])
    note = "the submission's calls ran at a 1350 MHz SM clock, 68% of the card's 1980 MHz: throttled"
    run["cases"][1]["notes"].append(note)
    run["cases"][2]["notes"].append(note)
    run["notes"].append("host-bound on 3 of 3 timed cases: ...")
    text = text_report(run, wide=True)
    header = text.splitlines()[0].split("  ")
    assert [h.strip() for h in header if h.strip()][5:8] == ["time us", "iqr/2 us", "host us"]
    row = next(line for line in text.splitlines() if line.startswith("a "))
    assert row.split()[6:9] == ["12.34", "0.20", "45.60"]   # time, iqr/2, host (worst at is two words)
    assert f"2 cases (b, c): note: {note}" in text.splitlines()
    assert "note: host-bound on 3 of 3 timed cases: ..." in text.splitlines()
    assert f"- 2 cases (b, c): note: {note}" in markdown_report(run).splitlines()


def test_cuda_graph_runs_show_no_host_time_their_host_ms_is_the_capture():
    run = _gpu_run(["a"])
    run["timing"]["mode"] = "cuda-graph-replay"
    assert "host us" not in text_report(run).splitlines()[0]
    row = next(line for line in text_report(run, wide=True).splitlines() if line.startswith("a "))
    assert row.split()[6:9] == ["12.34", "0.20", "-"]


def test_the_baselines_host_time_is_recorded_beside_the_submissions():
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "good_torch", only=(CASE,), baseline="torch")
    case = run["cases"][0]
    assert case["baseline"] == "torch" and case["host_ms"] > 0 and case["baseline_host_ms"] > 0
