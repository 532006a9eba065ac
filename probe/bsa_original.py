"""The bundled block_sparse_attn submission under the original package's own evaluator
(attention_kernel_challenge, carried in probe/orig/akc): first its CLI as published, then, where
its import guard cannot run on this Python, the same evaluate_submission_dir with only the two
guards replaced by no-ops (the loader's file checks, variant manifest, setup, warm-ups, compile
cache monitor, timing, the reference and validate_outputs are the original's)."""
import contextlib, json, subprocess, sys, time
sys.path.insert(0, "probe/orig/akc")
SUB = "submissions/block_sparse_attn"
SUITES = __import__("os").environ.get("SUITES", "quick,full").split(",")
for suite in SUITES if not __import__("os").environ.get("SKIP_CLI") else ():
    r = subprocess.run([sys.executable, "-m", "attention_kernel_challenge.cli", "eval-submission", "--submission-dir", SUB,
                        "--suite", suite, "--backend", "local", "--device", "cuda", "--emit-json"],
                       capture_output=True, text=True, env={**__import__("os").environ, "PYTHONPATH": "probe/orig/akc:" + __import__("os").environ.get("PYTHONPATH", "")})
    print(f"original CLI, {suite}: rc {r.returncode}; stdout tail: {r.stdout[-600:]!r}; stderr tail: {r.stderr[-400:]!r}", flush=True)
from attention_kernel_challenge import evaluator, submission_loader
from attention_kernel_challenge.spec import EvaluationConfig
submission_loader._submission_import_guard = lambda *a, **k: contextlib.nullcontext()
evaluator.submission_runtime_guard = lambda *a, **k: contextlib.nullcontext()
for suite in SUITES:
    t = time.time()
    s = evaluator.evaluate_submission_dir(SUB, suite, EvaluationConfig(device="cuda", check_correctness=True))
    print(f"guards off, {suite} ({time.time() - t:.0f} s): valid {s.overall_valid} geomean {s.geometric_mean_family_latency_ms} "
          f"worst {s.worst_family_latency_ms} reason {s.failure_reason}", flush=True)
    for c in s.case_results:
        v = c.validation
        print(f"  {c.case_id:<20} {c.latency_ms!s:>22} ms  passed {v.passed}  o diff {v.output_max_abs_diff:.3g}  "
              f"lse diff {v.lse_max_abs_diff:.3g}  {v.message}", flush=True)
