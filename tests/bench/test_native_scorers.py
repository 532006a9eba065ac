"""The native-protocol scorers on CPU (Triton's interpreter: a check of the scripts, their times mean
nothing): bench/mla_decode_native.py and bench/block_sparse_attn_native.py."""
import json
import subprocess
import sys

from tests.helpers import ROOT


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"bench/{script}", "--device", "cpu", "--baseline", "none", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)


def test_mla_decode_native_times_as_the_original_a_growing_cache_and_a_full_one(tmp_path):
    """GPU MODE's benchmark loop: the cache object kept from call to call (a growing context for a
    kernel that advances seq_len), set back only when its buffer is full; at least 3 runs."""
    proc = _run("mla_decode_native.py", "--max-runs", "3", "--warmup-s", "0",
                "--cases", "b3_h4_ctx300,b1_h4_ctx511", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "native.json").read_text())["targets"]["submission"]["records"]
    grows, full = records
    assert grows["status"] == full["status"] == "passed"
    # the checked call and 3 timed ones each appended a row: 300 -> 304, nothing set back
    assert (grows["runs"], grows["final_seq_len"], grows["cache_resets"]) == (3, 304, 0)
    # 511 rows in a 512-row buffer: full after the checked call, set back before each timed one
    assert (full["runs"], full["final_seq_len"], full["cache_resets"]) == (3, 512, 3)
    assert grows["mean_ms"] > 0 and grows["err_ms"] >= 0 and grows["best_ms"] <= grows["mean_ms"]
    assert "geomean latency" in proc.stdout


def test_block_sparse_attn_native_times_three_input_sets_and_scores_by_family(tmp_path):
    proc = _run("block_sparse_attn_native.py", "--cases", "smoke-window-1", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "native.json").read_text())
    assert result["suites"] == ["smoke"] and list(result["targets"]) == ["submission"]
    found = result["targets"]["submission"]
    (record,) = found["records"]
    assert record["case"] == "smoke-window-1" and record["status"] == "passed"
    assert len(record["samples_ms"]) == len(record["return_ms"]) == 3   # the original's 3 measure sets
    assert found["compile_cache"] == "unchanged"
    score = found["native"]["smoke"]
    assert score["details"]["family_median_latency_ms"] == {"sliding_window": record["latency_ms"]}
    assert "family geomean" in score["name"] and "native ms" in proc.stdout


def test_block_sparse_attn_native_names_a_case_it_does_not_have():
    proc = _run("block_sparse_attn_native.py", "--cases", "nope")
    assert proc.returncode == 1 and proc.stderr.strip().endswith("no case of smoke named nope")
