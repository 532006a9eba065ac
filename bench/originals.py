"""The bundled kernels under their original challenges' own harnesses: does each still load and pass there?

    python bench/originals.py ORIGINALS [--tasks mla_decode,qknorm,block_sparse_attn] [--out DIR]

ORIGINALS is a folder holding clones of the three public repositories (the harnesses are theirs,
never copied into kbench):
  reference-kernels/           gpu-mode/reference-kernels (problems/amd/mla-decode)
  Frontier-CS/                 FrontierCS/Frontier-CS (research/problems/qknorm)
  attention-kernel-challenge/  paradigmxyz/attention-kernel-challenge (attention_kernel_challenge/)
Each needs a CUDA GPU, and flashinfer for Frontier-CS's baseline.

- mla_decode: GPU MODE's eval.py in a scratch folder beside its task.py, reference.py and utils.py and
  the bundled submission's files: `test` on task.yml's four tests, then `benchmark` on them and
  prefill 4096 (its prefill 6144 benchmark runs out of memory in its own reference on an 80 GB card).
- qknorm: Frontier-CS's evaluator.py, given a `Solution` class that names the bundled file.
- block_sparse_attn: the challenge's CLI (`eval-submission --backend local --device cuda`) per suite;
  where it cannot run (on Python 3.12 its import guard recurses), its own `evaluate_submission_dir`
  with only its two import guards made no-ops, one suite per process as its CLI runs them.
Each prints the original's own verdict and figures; the logs go to --out. Exit 0 when every original
passed the bundled kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("mla_decode", "qknorm", "block_sparse_attn")
REPOS = {"mla_decode": "reference-kernels", "qknorm": "Frontier-CS", "block_sparse_attn": "attention-kernel-challenge"}
HARNESS = {"mla_decode": "problems/amd/mla-decode/eval.py", "qknorm": "research/problems/qknorm/evaluator.py",
           "block_sparse_attn": "attention_kernel_challenge/evaluator.py"}   # in each clone
LIMIT_S = 600
MLA_TESTS = [(128, 9247), (512, 2197), (1024, 9107), (2048, 5291)]   # task.yml's tests
MLA_BENCH = MLA_TESTS + [(4096, 9817)]                                # and its first benchmark


def _run(cmd, cwd, log: Path, env=None, fds=()) -> tuple[int, str]:
    """Run a command, its output to ``log``; (exit code, its standard output)."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=LIMIT_S, check=False,
                              pass_fds=fds)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = 124, exc.stdout or "", f"{exc.stderr or ''}\ntimed out after {LIMIT_S} s"
        stdout, stderr = (x.decode() if isinstance(x, bytes) else x for x in (stdout, stderr))
    log.write_text(f"$ {' '.join(map(str, cmd))}\n{stdout}{stderr}\n[exit {code}]\n")
    return code, stdout


def mla_decode(repo: Path, out: Path) -> bool:
    with tempfile.TemporaryDirectory(prefix="gpumode-") as scratch:
        return _mla_decode(repo, out, Path(scratch))


def _mla_decode(repo: Path, out: Path, work: Path) -> bool:
    for name in ("eval.py", "reference.py", "task.py", "utils.py"):
        shutil.copy(repo / "problems/amd/mla-decode" / name, work)
    for path in (ROOT / "submissions/mla_decode").glob("*.py"):
        shutil.copy(path, work)
    ok = True
    for mode, cases in (("test", MLA_TESTS), ("benchmark", MLA_BENCH)):
        (work / f"{mode}.txt").write_text("".join(
            f"batchsize: 128; dim: 7168; dq: 1536; prefill: {p}; seed: {s}\n" for p, s in cases))
        results = out / f"mla_decode-{mode}.txt"
        with results.open("w") as f:   # eval.py writes its results to the descriptor POPCORN_FD names
            code, _ = _run([sys.executable, "eval.py", mode, f"{mode}.txt"], work, out / f"mla_decode-{mode}.log",
                           env=dict(os.environ, POPCORN_FD=str(f.fileno())), fds=(f.fileno(),))
        lines = results.read_text().splitlines()
        found = dict(line.split(": ", 1) for line in lines if ": " in line)
        ok &= code == 0 and found.get("check") == "pass"
        if mode == "test":
            print(f"mla_decode, eval.py test: exit {code}, check {found.get('check')}; "
                  + ", ".join(f"{found.get(f'test.{i}.spec', '?').split('prefill: ')[-1].split(';')[0]} "
                              f"{found.get(f'test.{i}.status')}" for i in range(len(cases))), flush=True)
        else:
            print(f"mla_decode, eval.py benchmark: exit {code}, check {found.get('check')}", flush=True)
            for i, (prefill, _) in enumerate(cases):
                mean, best = found.get(f"benchmark.{i}.mean"), found.get(f"benchmark.{i}.best")
                if mean is not None:
                    print(f"  prefill {prefill}: mean {float(mean) / 1e3:.1f} us, best {float(best) / 1e3:.1f} us, "
                          f"{found.get(f'benchmark.{i}.runs')} runs", flush=True)
    return ok


def qknorm(repo: Path, out: Path) -> bool:
    with tempfile.TemporaryDirectory(prefix="frontier-") as scratch:
        return _qknorm(repo, out, Path(scratch))


def _qknorm(repo: Path, out: Path, work: Path) -> bool:
    shutil.copytree(repo / "research/problems/qknorm", work, dirs_exist_ok=True)
    program = ROOT / "submissions/qknorm/submission.py"
    (work / "solution.py").write_text("class Solution:\n    def solve(self, spec_path=None):\n"
                                      f"        return {{'program_path': {str(program)!r}}}\n")
    code, _ = _run([sys.executable, "evaluator.py", "--solution-path", "solution.py", "--spec-path",
                    "resources/submission_spec.json", "--output-path", "result.json"], work, out / "qknorm.log")
    result = json.loads((work / "result.json").read_text()) if (work / "result.json").is_file() else {}
    if result:
        shutil.copy(work / "result.json", out / "qknorm-result.json")
    print(f"qknorm, Frontier-CS evaluator: exit {code}, {result.get('status')}, "
          f"{result.get('passed_tests')}/{result.get('total_tests')} passed, geomean "
          f"{result.get('geometric_mean_speedup', 0):.3f}x, score {result.get('score')} "
          f"(unbounded {result.get('score_unbounded', 0):.1f}){' ' + result['error'] if 'error' in result else ''}",
          flush=True)
    return code == 0 and result.get("status") == "success" and bool(result.get("pass_all"))


def _akc_summary(stdout: str) -> dict | None:
    """The challenge's summary, the JSON object its --emit-json prints (the last thing on stdout)."""
    start = stdout.find("{")
    try:
        return json.loads(stdout[start:stdout.rindex("}") + 1]) if start >= 0 else None
    except ValueError:
        return None


def block_sparse_attn(repo: Path, out: Path) -> bool:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])))
    submission = str(ROOT / "submissions/block_sparse_attn")
    ok = True
    for suite in ("quick", "full"):
        code, text = _run([sys.executable, "-m", "attention_kernel_challenge.cli", "eval-submission", "--submission-dir",
                           submission, "--suite", suite, "--backend", "local", "--device", "cuda", "--emit-json"],
                          ROOT, out / f"block_sparse_attn-{suite}-cli.log", env=env)
        summary, how = _akc_summary(text), "its CLI"
        if summary is None or not summary.get("overall_valid"):
            reason = (summary or {}).get("failure_reason") or "no summary printed"
            print(f"block_sparse_attn {suite}, its CLI: exit {code}, {reason}", flush=True)
            code, text = _run([sys.executable, __file__, "--guards-off", suite], ROOT,
                              out / f"block_sparse_attn-{suite}.log", env=env)
            summary, how = _akc_summary(text), "its evaluator, import guards off"
        summary = summary or {}
        print(f"block_sparse_attn {suite}, {how}: valid {summary.get('overall_valid')}, family geomean "
              f"{summary.get('geometric_mean_family_latency_ms')} ms, {summary.get('failure_reason') or 'no failure'}",
              flush=True)
        for case in summary.get("case_results", []):
            v = case.get("validation") or {}
            print(f"  {case['case_id']:<18} {case.get('latency_ms') or 0:.3f} ms  passed {v.get('passed')}  "
                  f"o {v.get('output_max_abs_diff', 0):.3g}  lse {v.get('lse_max_abs_diff', 0):.3g}", flush=True)
        ok &= bool(summary.get("overall_valid"))
    return ok


def _guards_off(suite: str) -> int:
    """The challenge's own evaluate_submission_dir, its two import guards replaced by no-ops (run as a child)."""
    import contextlib

    from attention_kernel_challenge import evaluator, submission_loader
    from attention_kernel_challenge.spec import EvaluationConfig

    submission_loader._submission_import_guard = lambda *a, **k: contextlib.nullcontext()
    evaluator.submission_runtime_guard = lambda *a, **k: contextlib.nullcontext()
    summary = evaluator.evaluate_submission_dir(str(ROOT / "submissions/block_sparse_attn"), suite,
                                                EvaluationConfig(device="cuda", check_correctness=True))
    print(summary.to_json())
    return 0 if summary.overall_valid else 1


def main() -> int:
    if sys.argv[1:2] == ["--guards-off"]:
        return _guards_off(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("originals", type=Path, help="the folder holding the three repositories' clones")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--out", type=Path, default=None, help="the logs (default: a temporary folder)")
    args = ap.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        ap.error(f"unknown task {unknown[0]!r}: one of {', '.join(TASKS)}")
    missing = [f"{HARNESS[t]} in {args.originals / REPOS[t]}" for t in tasks
               if not (args.originals / REPOS[t] / HARNESS[t]).is_file()]
    if missing:
        ap.error(f"no {missing[0]}: ORIGINALS must hold a clone of each original's repository")
    import torch
    if not torch.cuda.is_available():
        ap.error("the originals' harnesses need a CUDA GPU")
    out = args.out or Path(tempfile.mkdtemp(prefix="originals-"))
    out.mkdir(parents=True, exist_ok=True)
    runs = {"mla_decode": mla_decode, "qknorm": qknorm, "block_sparse_attn": block_sparse_attn}
    passed = {t: runs[t](args.originals / REPOS[t], out) for t in tasks}
    verdicts = ", ".join(f"{t} {'passed' if ok else 'FAILED'}" for t, ok in passed.items())
    print(f"\n{verdicts}; logs in {out}")
    return 0 if all(passed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
