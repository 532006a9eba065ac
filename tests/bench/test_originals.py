"""bench/originals.py's plumbing on CPU, against stand-ins for the three original harnesses that answer
the way the real ones do (GPU MODE's results on the POPCORN_FD descriptor, Frontier-CS's result.json,
the attention challenge's JSON summary); the real harnesses need a GPU."""
import importlib.util
import json
import subprocess
import sys
import textwrap

from tests.helpers import ROOT


def _tool():
    spec = importlib.util.spec_from_file_location("originals", ROOT / "bench" / "originals.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _gpu_mode(tmp_path, eval_py: str):
    """A reference-kernels clone whose mla-decode eval.py is ``eval_py``, and an empty folder for the logs."""
    problem = tmp_path / "reference-kernels/problems/amd/mla-decode"
    _write(problem / "eval.py", eval_py)
    for name in ("reference.py", "task.py", "utils.py"):
        _write(problem / name, "")
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path / "reference-kernels", out


def test_gpu_mode_results_are_read_from_the_descriptor_eval_py_is_given(tmp_path, capsys):
    repo, out = _gpu_mode(tmp_path, """\
        import os, sys
        cases = open(sys.argv[2]).read().splitlines()
        with os.fdopen(int(os.environ["POPCORN_FD"]), "w") as f:
            for i, spec in enumerate(cases):
                if sys.argv[1] == "test":
                    print(f"test.{i}.spec: {spec}", file=f); print(f"test.{i}.status: pass", file=f)
                else:
                    print(f"benchmark.{i}.runs: 3", file=f); print(f"benchmark.{i}.mean: {(i + 1) * 1e5}", file=f)
                    print(f"benchmark.{i}.best: {(i + 1) * 9e4}", file=f)
            print("check: pass", file=f)
        """)
    assert _tool().mla_decode(repo, out)
    printed = capsys.readouterr().out
    assert "eval.py test: exit 0, check pass; 128 pass, 512 pass, 1024 pass, 2048 pass" in printed
    assert "prefill 4096: mean 500.0 us, best 450.0 us, 3 runs" in printed
    assert (out / "mla_decode-benchmark.txt").read_text().splitlines()[-1] == "check: pass"


def test_a_failed_gpu_mode_check_fails_the_task(tmp_path):
    repo, out = _gpu_mode(tmp_path, """\
        import os
        with os.fdopen(int(os.environ["POPCORN_FD"]), "w") as f:
            print("check: fail", file=f)
        raise SystemExit(112)
        """)
    assert not _tool().mla_decode(repo, out)


def test_frontier_cs_gets_a_solution_naming_the_bundled_file(tmp_path, capsys):
    problem = tmp_path / "Frontier-CS/research/problems/qknorm"
    _write(problem / "resources/submission_spec.json", "{}")
    _write(problem / "evaluator.py", """\
        import importlib.util, json
        spec = importlib.util.spec_from_file_location("s", "solution.py"); m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        path = m.Solution().solve()["program_path"]
        json.dump({"status": "success", "pass_all": path.endswith("submissions/qknorm/submission.py"),
                   "passed_tests": 20, "total_tests": 20, "geometric_mean_speedup": 1.5, "score": 100,
                   "score_unbounded": 150.0}, open("result.json", "w"))
        """)
    out = tmp_path / "out"
    out.mkdir()
    assert _tool().qknorm(tmp_path / "Frontier-CS", out)
    assert "20/20 passed, geomean 1.500x, score 100 (unbounded 150.0)" in capsys.readouterr().out
    assert json.loads((out / "qknorm-result.json").read_text())["pass_all"] is True


def test_the_attention_challenge_falls_back_to_its_evaluator_when_its_cli_cannot_run(tmp_path, capsys):
    package = tmp_path / "attention-kernel-challenge/attention_kernel_challenge"
    _write(package / "__init__.py", "")
    # the CLI as it runs on Python 3.12: a summary that says setup failed
    _write(package / "cli.py", """\
        import json, sys
        print(json.dumps({"suite": sys.argv[sys.argv.index("--suite") + 1], "overall_valid": False,
                          "case_results": [], "failure_reason": "Setup failed: maximum recursion depth exceeded"}))
        sys.exit(1)
        """)
    _write(package / "submission_loader.py", "def _submission_import_guard(mods):\n    raise RecursionError\n")
    _write(package / "spec.py", "class EvaluationConfig:\n    def __init__(self, **kw):\n        self.kw = kw\n")
    _write(package / "evaluator.py", """\
        import json
        from attention_kernel_challenge import submission_loader
        def submission_runtime_guard():
            raise RecursionError
        class Summary:
            overall_valid = True
            def __init__(self, suite):
                self.suite = suite
            def to_json(self):
                with submission_loader._submission_import_guard(set()), submission_runtime_guard():
                    pass
                return json.dumps({"suite": self.suite, "overall_valid": True, "failure_reason": None,
                                   "geometric_mean_family_latency_ms": 0.25, "case_results": [
                                       {"case_id": f"{self.suite}-window-1", "latency_ms": 0.2, "validation": {
                                           "passed": True, "output_max_abs_diff": 0.0078, "lse_max_abs_diff": 1e-6}}]})
        def evaluate_submission_dir(path, suite, config):
            assert path.endswith("submissions/block_sparse_attn") and config.kw["check_correctness"]
            return Summary(suite)
        """)
    out = tmp_path / "out"
    out.mkdir()
    assert _tool().block_sparse_attn(tmp_path / "attention-kernel-challenge", out)
    printed = capsys.readouterr().out
    assert "block_sparse_attn full, its CLI: exit 1, Setup failed: maximum recursion depth exceeded" in printed
    assert "block_sparse_attn full, its evaluator, import guards off: valid True, family geomean 0.25 ms" in printed
    assert "full-window-1" in printed and "passed True" in printed


def test_a_folder_without_the_originals_is_refused_in_one_line(tmp_path):
    (tmp_path / "Frontier-CS").mkdir()
    proc = subprocess.run([sys.executable, "bench/originals.py", str(tmp_path), "--tasks", "qknorm"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"error: no research/problems/qknorm/evaluator.py in {tmp_path / 'Frontier-CS'}: ORIGINALS must hold a "
        "clone of each original's repository")
