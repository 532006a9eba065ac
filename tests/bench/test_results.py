"""bench/results.py: the tables docs/results.md is written from, on run records shaped as a GPU
`kbench eval --json` writes them; and the inputs it refuses (CPU mode, a missing file, not JSON)."""
import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "results.py"

spec = importlib.util.spec_from_file_location("bench_results", SCRIPT)
results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results)

H100 = {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "l2_bytes": 52428800,
        "memory_bytes": 85045231616, "torch": "2.11.0+cu130", "cuda": "13.0", "copy_gbps": 3001.2,
        "matmul_bf16_tflops": 781.4, "driver_version": "580.159.04", "clocks_sm": "1980 MHz",
        "clocks_mem": "2619 MHz", "clocks_max_sm": "1980 MHz", "power_limit": "700.00 W"}
H200 = dict(H100, name="NVIDIA H200", memory_bytes=150754820096, copy_gbps=4223.0, matmul_bf16_tflops=781.0)


def qknorm_case(name, batch, kv_heads, latency_us, baseline_us, card, status="passed"):
    """A case record as kbench/run/records.py writes it on CUDA (the fields of a real CPU record of
    `kbench eval submissions/qknorm --json`, with the timing fields a GPU run fills in), its roofline
    fields computed as the records' add_roofline computes them."""
    rows, d = batch * (32 + kv_heads), 128
    nbytes, flops = (2 * rows * d + d) * 2, 4 * rows * d
    passed = status == "passed"
    lat = latency_us / 1e3 if passed else None
    base = baseline_us / 1e3
    rec = {
        "case": name, "params": {"batch": batch, "num_qo_heads": 32, "num_kv_heads": kv_heads, "head_dim": d,
                                 "dtype": "float16", "seq": 0, "seed": 6},
        "status": status, "reason": "" if passed else "1 of 5120 elements out of tolerance",
        "max_abs_err": 0.000977, "max_rel_err": 0.00049, "max_abs_err_at": "timed call 3",
        "max_rel_err_at": "first call", "latency_ms": lat,
        "latency_q1_ms": lat and lat * 0.99, "latency_q3_ms": lat and lat * 1.01,
        "latency_ci95_ms": [round(lat * 0.97, 6), round(lat * 1.03, 6)] if passed else None,
        "noise": 0.0153 if passed else None, "samples": 50 if passed else 0,
        "host_ms": 0.0512 if passed else None, "baseline": "flashinfer", "baseline_latency_ms": base,
        "baseline_ci95_ms": [base * 0.98, base * 1.02], "baseline_samples": 50, "baseline_noise": 0.01,
        "speedup": round(base / lat, 4) if passed else None, "flags": [], "notes": [],
        "baseline_problem": None, "baseline_status": "passed", "baseline_reason": "",
        "gate_ms": 0.21, "sm_clock_mhz": 1968.0, "latency_by_process_ms": [lat, lat] if passed else [],
        "process_ids": [0, 1], "baseline_gate_ms": 0.2, "baseline_host_ms": 0.031,
        "baseline_sm_clock_mhz": 1969.0, "baseline_by_process_ms": [base, base],
        "baseline_process_ids": [0, 1], "wall_s": 0.9, "bytes": nbytes, "flops": flops,
    }
    floor_ms = max(nbytes / (card["copy_gbps"] * 1e9), flops / (card["matmul_bf16_tflops"] * 1e12)) * 1e3
    rec["roofline_ms"] = round(floor_ms, 6)
    rec["gbps"] = round(nbytes / (lat * 1e-3) / 1e9, 2) if lat else None
    rec["tflops"] = round(flops / (lat * 1e-3) / 1e12, 2) if lat else None
    rec["pct_of_copy_bw"] = round(100 * rec["gbps"] / card["copy_gbps"], 1) if lat else None
    rec["roofline_fraction"] = round(floor_ms / lat, 4) if lat else None
    return rec


def gpu_run(card=H100, created="2026-11-23T10:02:11+00:00", fail=False):
    cases = [qknorm_case("kv8_q32_d128_b1", 1, 8, 4.45, 7.40, card),
             qknorm_case("kv32_q32_d128_b256", 256, 32, 7.69, 10.64, card,
                         status="mismatch" if fail else "passed")]
    passed = [c for c in cases if c["status"] == "passed"]
    geo = results.geomean(c["speedup"] for c in cases) if len(passed) == len(cases) else None
    native = ({"name": "Frontier-CS score", "value": 0.0, "unit": "points", "lower_is_better": False,
               "reason": "1/2 cases did not pass: Frontier-CS scores 0", "details": {"score_unbounded": 0.0}}
              if fail else
              {"name": "Frontier-CS score", "value": 100.0, "unit": "points", "lower_is_better": False,
               "reason": None, "details": {"score_unbounded": round(100 * geo, 3)}})
    return {
        "kbench_version": "0.1.0", "created": created, "task": "qknorm", "suite": "quick",
        "submission": "submissions/qknorm", "device": card,
        "host": {"python": "3.12.3", "node": "gpu-host"},
        "timing": {"mode": "cuda-events", "meaningful": True, "l2_flush": True, "noise_target": 0.01,
                   "min_samples": 10, "max_samples": 1000, "budget_s_per_case": 2.0, "root_seed": None,
                   "processes": 2, "pool": 8, "process_spread_pct": {"case": 1.1, "baseline": 0.8},
                   "cuda_connections": None, "environment_not_passed_on": {}, "environment_passed_on": {}},
        "baseline": "flashinfer",
        "wall": {"total_s": 11.4, "startup": {}, "other_contexts": []},
        "notes": ["host-bound on 2 of 2 timed cases: the call takes longer to return on the host than to run "
                  "on the device"],
        "cases": cases,
        "summary": {"passed": len(passed), "total": len(cases), "statuses": {}, "flagged": 0, "lost": 0,
                    "fatal": None, "geomean_speedup": round(geo, 4) if geo else None, "native": native},
    }


def write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


def run_main(argv, capsys):
    code = results.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_gpu_run_gives_card_date_commit_command_and_a_row_per_case(tmp_path, capsys):
    path = write(tmp_path / "h100.json", gpu_run())
    code, out, err = run_main([path, "--commit", "abc1234"], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "# Current figures"
    assert f"`python bench/results.py {path} --commit abc1234`." in lines
    assert "## qknorm" in lines and "### quick" in lines
    assert "#### NVIDIA H100 80GB HBM3: `submissions/qknorm`" in lines
    assert ("- card: NVIDIA H100 80GB HBM3 (132 SMs, driver 580.159.04, copy 3001 GB/s, bf16 matmul 781 "
            "TFLOP/s, max SM clock 1980 MHz)") in lines
    assert "- date: 2026-11-23; kbench 0.1.0, commit abc1234" in lines
    assert "- command: `kbench eval submissions/qknorm --suite quick --baseline flashinfer`" in lines
    assert "- timing: CUDA events, 2 processes a case, pool 8" in lines
    # every case passed: no status column
    assert ("| case | device us | 95% interval | flashinfer us | speedup | of roofline | % copy bw | TFLOP/s "
            "| host us |") in lines
    assert "| kv8_q32_d128_b1 | 4.45 | [4.32, 4.58] | 7.40 | 1.66x | 0.16% | 0.2% | 0 | 51.20 |" in lines
    assert "| kv32_q32_d128_b256 | 7.69 | [7.46, 7.92] | 10.64 | 1.38x | 36% | 36% | 1.09 | 51.20 |" in lines
    assert ("passed 2/2; geomean speedup 1.517x over flashinfer; Frontier-CS score: 100 points; "
            "score_unbounded 151.684.") in lines
    assert any(line.startswith("- note: host-bound on 2 of 2 timed cases") for line in lines)


def test_back_to_back_runs_give_the_ceilings_and_roofline_shares_run_to_run(tmp_path, capsys):
    runs = []
    for i, (fresh, scale) in enumerate([(2999.0, 1.0), (2990.5, 1.01), (3004.0, 0.995)]):
        run = gpu_run()
        run["device"] = dict(H100, copy_gbps_this_run=fresh, matmul_bf16_tflops_this_run=780.0 + i)
        for case in run["cases"]:
            case["latency_ms"] /= scale
        runs.append(write(tmp_path / f"default-{i + 1}.json", run))
    code, out, err = run_main([runs[0], "--repeats", *runs], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert "### Run to run: 3 back-to-back runs on NVIDIA H100 80GB HBM3" in lines
    assert "| 2 | 3001 | 2990 | 781 | 781 | 1.517x |" in lines
    assert "| spread | 0.00% | 0.45% | 0.00% | 0.26% | 0.00% |" in lines
    case = gpu_run()["cases"][1]   # the b256 case, its time scaled per run
    share = case["roofline_ms"] / case["latency_ms"]
    low, high = share * 0.995, share * 1.01
    row = [line for line in lines if line.startswith("| kv32_q32_d128_b256 |")][-1]
    assert row == f"| kv32_q32_d128_b256 | {100 * low:.2f}% | {100 * high:.2f}% | {100 * (high / low - 1):.2f}% |"
    assert f"The roofline shares of one case lie at most {100 * (high / low - 1):.2f}% apart over the 3 runs." in lines


def test_a_failed_case_shows_its_status_and_no_geomean(tmp_path, capsys):
    code, out, _ = run_main([write(tmp_path / "r.json", gpu_run(fail=True))], capsys)
    assert code == 0
    assert ("| case | status | device us | 95% interval | flashinfer us | speedup | of roofline | % copy bw "
            "| TFLOP/s | host us |") in out
    assert "| kv32_q32_d128_b256 | mismatch | - | - | 10.64 | - | - | - | - | - |" in out
    assert ("passed 1/2; no geomean speedup (not every case passed); Frontier-CS score: 0 points "
            "(1/2 cases did not pass: Frontier-CS scores 0); score_unbounded 0.") in out
    assert "commit not recorded (pass --commit)" in out


def test_several_cards_stand_side_by_side_each_naming_its_card(tmp_path, capsys):
    both = write(tmp_path / "both.json", {"runs": [gpu_run()]})
    h200 = gpu_run(H200, created="2026-11-29T08:00:00+00:00")
    for case in h200["cases"]:
        case["latency_ms"] *= 0.95
    other = write(tmp_path / "h200.json", h200)
    code, out, _ = run_main([both, other, "--commit", "1111111", "--commit", "2222222"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert "Device time per case on each card:" in lines
    assert "| case | NVIDIA H100 80GB HBM3 (1111111) us | NVIDIA H200 (2222222) us |" in lines
    assert "| kv8_q32_d128_b1 | 4.45 | 4.23 |" in lines
    assert "#### NVIDIA H100 80GB HBM3: `submissions/qknorm`" in lines
    assert "#### NVIDIA H200: `submissions/qknorm`" in lines
    assert "- date: 2026-11-29; kbench 0.1.0, commit 2222222" in lines
    assert out.count("## qknorm") == 1 and out.count("### quick") == 1


def test_the_command_is_rebuilt_from_the_record_or_taken_as_given(tmp_path, capsys):
    run = gpu_run()
    run["timing"].update(mode="cuda-graph-replay", cuda_connections=1, root_seed=1234, processes=8,
                         noise_target=0.004)
    run["baseline"] = None
    run["kbench_commit"] = "feedbee"
    code, out, _ = run_main([write(tmp_path / "g.json", run)], capsys)
    assert code == 0
    assert ("- command: `kbench eval submissions/qknorm --suite quick --baseline none --cuda-graph "
            "--cuda-connections 1 --seed 1234 --processes 8 --noise 0.004`") in out
    assert "commit feedbee" in out and "CUDA-graph replays" in out
    assert "| host us" not in out  # a graph replay's host time is the capture's
    code, out, _ = run_main([write(tmp_path / "g2.json", gpu_run()), "--command", "kbench eval x --suite quick"],
                            capsys)
    assert "- command: `kbench eval x --suite quick`" in out


def cpu_record():
    run = gpu_run()
    run["device"] = {"device": "cpu", "name": "x86_64", "torch": "2.13.0+cpu"}
    run["timing"].update(mode="cpu-wall-clock", meaningful=False, l2_flush=False, processes=1, pool=1)
    return run


@pytest.mark.parametrize("make, expected", [
    (lambda d: write(d / "cpu.json", cpu_record()), "ran in CPU mode"),
    (lambda d: write(d / "cpu-runs.json", {"runs": [gpu_run(), cpu_record()]}), "ran in CPU mode"),
    (lambda d: str(d / "missing.json"), "no such file"),
    (lambda d: (d / "bad.json").write_text("{not json") and str(d / "bad.json"), "not JSON (line 1"),
    (lambda d: write(d / "other.json", {"hello": 1}), "not a kbench run record"),
    (lambda d: write(d / "empty.json", {"runs": []}), "no run records"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_2(tmp_path, make, expected):
    good = write(tmp_path / "good.json", gpu_run())
    path = make(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), good, path], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""  # nothing half-written
    assert len(proc.stderr.splitlines()) == 1 and expected in proc.stderr and path in proc.stderr


def test_commit_given_neither_once_nor_once_per_file_is_refused(tmp_path, capsys):
    a, b = write(tmp_path / "a.json", gpu_run()), write(tmp_path / "b.json", gpu_run())
    code, out, err = run_main([a, b, "--commit", "1", "--commit", "2", "--commit", "3"], capsys)
    assert code == 2 and out == "" and "--commit given 3 times for 2 files" in err


def test_the_cpu_record_shape_is_what_kbench_writes():
    """The record built here carries every key of a real run record and case record."""
    run = gpu_run()
    real_run_keys = {"kbench_version", "created", "task", "suite", "submission", "device", "host", "timing",
                     "baseline", "wall", "notes", "cases", "summary"}
    assert real_run_keys <= set(run)
    assert {"latency_ms", "latency_ci95_ms", "baseline_latency_ms", "speedup", "host_ms", "roofline_ms",
            "gbps", "tflops", "pct_of_copy_bw", "roofline_fraction"} <= set(run["cases"][0])
    assert copy.deepcopy(run) == json.loads(json.dumps(run))
