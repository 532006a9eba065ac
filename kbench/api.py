"""kbench's Python API: evaluate submissions and compare results, as the command line does.

An automated kernel search keeps or reverts each edit on kbench's verdict::

    import kbench

    best = kbench.evaluate("my_kernel", suite="quick")
    ...  # edit my_kernel/submission.py
    new = kbench.evaluate("my_kernel", suite="quick")
    result = kbench.compare(best, new)
    if result["summary"]["verdict"] == "FASTER":   # the geomean's, at 95%
        best = new

Every function returns the same JSON-ready records the command line prints and saves
(``kbench eval --json``, ``kbench compare --json``). A usage mistake (unknown task, suite or
case, a path with nothing to load, a device that is not there) raises ``KbenchError`` with
one line; the command line prints that line and exits 2. Notices the command line writes to
stderr (CPU mode, capped options, two results from different cards) are appended to
``notices`` when a list is given.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import os
from pathlib import Path

from kbench.errors import KbenchError
from kbench.stats.estimates import DEFAULT_PROCESSES, StopRule

# CPU mode: timings are not meaningful there, a few calls are enough
CPU_CAPS = {"budget_s": 1.0, "min_samples": 3, "max_samples": 3, "processes": 1}


def resolve_device(requested: str = "auto", notices: list[str] | None = None) -> str:
    """``cuda`` or ``cpu`` for ``auto``, ``cuda`` or ``cpu``; KbenchError if CUDA was asked for and is
    not there."""
    if requested not in ("auto", "cuda", "cpu"):
        raise KbenchError(f"unknown device {requested!r} (auto, cuda or cpu)")
    if requested == "cpu":
        return "cpu"
    if requested == "cuda" and not os.path.exists("/dev/nvidiactl"):   # answered without importing torch
        raise KbenchError("--device cuda asked for, but no CUDA device is available")
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise KbenchError("--device cuda asked for, but no CUDA device is available")
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    _say(notices, "no CUDA device: CPU mode (Triton interpreter, correctness only)")
    return "cpu"


def options(device: str = "auto", *, suite: str | None = None, cases=(), baseline: str | None = None,
            baseline_path: Path | None = None, seed: int | None = None, timeout: float = 120.0,
            noise: float = StopRule.noise, budget_s: float | None = None, min_samples: int | None = None,
            max_samples: int | None = None,
            processes: int = DEFAULT_PROCESSES, pool: int | None = None, cuda_graph: bool = False,
            cuda_connections: int | None = None, progress=None, warm_next: bool = False,
            notices: list[str] | None = None):
    """The run's Options, checked: the device resolved, CPU mode's caps applied (and said, for the
    stop rule's settings given here; None is the stop rule's default)."""
    from kbench.run.runner import Options

    for name, value, low in (("--timeout", timeout, 0.0), ("--budget", budget_s, 0.0), ("--noise", noise, None)):
        if value is not None and not (math.isfinite(value) and (value > low if low is not None else value >= 0)):
            raise KbenchError(f"{name} {value:g}: give a finite number {'above 0' if low is not None else 'of 0 or more'}")
    for name, value in (("--min-samples", min_samples), ("--max-samples", max_samples)):
        if value is not None and value < 1:
            raise KbenchError(f"{name} {value}: give 1 or more")
    if (min_samples or StopRule.min_samples) > (max_samples or StopRule.max_samples):
        raise KbenchError(f"--min-samples {min_samples or StopRule.min_samples} is over --max-samples "
                          f"{max_samples or StopRule.max_samples}")
    device = resolve_device(device, notices)
    if cuda_graph and device != "cuda":
        raise KbenchError("--cuda-graph needs a CUDA device")
    if cuda_connections is not None and device != "cuda":
        raise KbenchError("--cuda-connections needs a CUDA device")
    given = {"budget_s": budget_s, "min_samples": min_samples, "max_samples": max_samples}
    stop = {"budget_s": StopRule.budget_s, "min_samples": StopRule.min_samples, "max_samples": StopRule.max_samples,
            "processes": processes, **{k: v for k, v in given.items() if v is not None}}
    if device == "cpu":
        cut = [f"--{k.removesuffix('_s').replace('_', '-')} {CPU_CAPS[k]:g}" for k, v in given.items()
               if v is not None and v > CPU_CAPS[k]]
        if cut:
            _say(notices, f"CPU mode: capped to {', '.join(cut)} (timings are not meaningful there)")
        stop = {k: min(v, CPU_CAPS[k]) for k, v in stop.items()}
    return Options(suite=suite or ("quick" if device == "cuda" else "smoke"), device=device,
                   only=tuple(dict.fromkeys(cases)) or None,   # a case given twice runs once
                   baseline=baseline, baseline_path=baseline_path, timeout=timeout,
                   seed=seed, stop=StopRule(noise=noise, min_samples=stop["min_samples"],
                                            max_samples=stop["max_samples"], budget_s=stop["budget_s"]),
                   cuda_graph=cuda_graph, cuda_connections=cuda_connections, processes=stop["processes"],
                   pool=None if device == "cpu" else pool, progress=progress, warm_next=warm_next)


def task_of(path: Path, task: str | None = None):
    """The Task of a submission (``task`` by name, else from the folder), its files checked."""
    from kbench.tasks.task import detect_task, get_task, submission_file

    path = Path(path)
    if not path.exists():
        raise KbenchError(f"{path}: no such file or directory")
    if task:
        found = get_task(task)
    else:
        try:
            found = detect_task(path)
        except KbenchError:
            files = [path] if path.is_file() else sorted(path.glob("*.py"))
            for f in files:
                try:
                    ast.parse(f.read_text(errors="replace"), str(f))
                except SyntaxError as err:
                    line = f" line {err.lineno}" if err.lineno else ""   # none for a NUL byte
                    raise KbenchError(f"cannot tell the task of {path}: {f.name}{line}: "
                                      f"SyntaxError: {err.msg}") from None
            raise
    submission_file(found, path)
    return found


def evaluate(submission, *, task: str | None = None, notices: list[str] | None = None, **settings) -> dict:
    """Check a submission on every case of a suite and time it against the task's baseline.

    ``settings`` are ``options()``'s: ``device`` ("auto"), ``suite`` (quick on a GPU, smoke on CPU),
    ``cases``, ``baseline`` ("none" for none), ``seed``, ``budget_s``, ``processes``, ``pool``,
    ``cuda_graph`` and the rest. Returns the run's record (``kbench eval --json``)."""
    from kbench.run.runner import Runner
    from kbench.worker import environment

    environment.take_from_process()
    found = task_of(submission, task)
    return Runner(found, options(notices=notices, **settings)).run(Path(submission))


def evaluate_many(submissions, *, task: str | None = None, gpus: str | None = None, ray: str | None = None,
                  notices: list[str] | None = None, **settings) -> list[dict]:
    """Several submissions of one task: one after another in this process, or spread over this
    host's GPUs (``gpus``: "all", "N" or "0,1") or a Ray cluster (``ray``: "auto" or an address).
    One record per submission, in order."""
    from kbench.worker import environment

    environment.take_from_process()
    paths = [Path(p) for p in submissions]
    if gpus is not None and ray is not None:
        raise KbenchError("--gpus and --ray: give one (--ray runs on the GPUs of a cluster's hosts)")
    opts = options(notices=notices, **settings)
    found = one_task(paths, task, opts)
    if gpus is not None:
        from kbench.scaleout.gpus import parse_gpus, run_on_gpus, visible_gpus

        if opts.device != "cuda":
            raise KbenchError("--gpus needs CUDA GPUs and this run is on CPU (CPU workers on a local cluster: --ray auto)")
        try:
            indices = parse_gpus(gpus, visible_gpus())
        except ValueError as exc:
            raise KbenchError(str(exc)) from None
        return run_on_gpus(found, paths, opts, indices)
    if ray is not None:
        from kbench.scaleout.ray import run_on_ray

        return run_on_ray(found, paths, opts, ray)
    from kbench.run.runner import Runner

    return [Runner(found, dataclasses.replace(opts, warm_next=i + 1 < len(paths))).run(p)
            for i, p in enumerate(paths)]


def one_task(submissions, task: str | None, opts):
    """The one task of ``submissions``, its suite and cases checked against ``opts`` (``options()``):
    a mistake is said before the first submission's workers start, and no finished run is lost to it."""
    tasks = {t.name: t for t in (task_of(p, task) for p in submissions)}
    if len(tasks) > 1:
        raise KbenchError(f"submissions of different tasks ({', '.join(sorted(tasks))}): one task per run")
    found = next(iter(tasks.values()))
    found.cases(opts.suite, opts.only, opts.device)
    return found


def compare(a, b, *, task: str | None = None, normalize: bool = False, notices: list[str] | None = None,
            **settings) -> dict:
    """Is B faster than A? Per case FASTER / SLOWER / SAME / UNSURE, and the geomean, each with its
    95% interval (``kbench compare --json``).

    A and B are each a run record (a dict, as ``evaluate`` returns), a saved result (a path to
    ``kbench eval --json``'s file; ``file.json:NAME`` picks one run of a several-submission file)
    or a submission folder. Two folders are timed interleaved in one run, on the same inputs;
    one folder beside a saved result is run like it (its suite, seed and CUDA connections)."""
    from kbench.stats.compare import compare_interleaved, compare_runs, different_cards, load_result

    saved_a, saved_b = (_saved(x, load_result) for x in (a, b))
    if saved_a is not None and saved_b is not None:
        result, task_name = compare_runs(saved_a, saved_b, normalize), saved_a["task"]
        sides = (saved_a, saved_b)
    elif saved_a is None and saved_b is None:
        ta, tb = task_of(a, task), task_of(b, task)
        if ta.name != tb.name:
            raise KbenchError(f"{a} is a {ta.name} submission but {b} is {tb.name}")
        fresh = evaluate(b, task=ta.name, notices=notices, baseline_path=Path(a), **settings)
        result, task_name, sides = compare_interleaved(fresh), fresh["task"], None
    else:
        saved, folder, source = (saved_a, b, a) if saved_a is not None else (saved_b, a, b)
        label = "the saved result" if isinstance(source, dict) else str(source)
        if task and task != saved["task"]:
            raise KbenchError(f"--task {task}, but {label} is a {saved['task']} result")
        found = task_of(folder, task)
        if found.name != saved["task"]:
            raise KbenchError(f"{folder} is a {found.name} submission but {label} is a {saved['task']} result")
        # like with like: the saved run's suite, seed and (on a GPU) CUDA connections
        timing = saved.get("timing", {})
        settings["suite"] = settings.get("suite") or saved["suite"]
        if settings.get("seed") is None:
            settings["seed"] = timing.get("root_seed")
        if settings.get("cuda_connections") is None and resolve_device(settings.get("device", "auto")) == "cuda":
            settings["cuda_connections"] = timing.get("cuda_connections")
        settings["baseline"] = "none"
        fresh = evaluate(folder, task=saved["task"], notices=notices, **settings)
        sides = (saved, fresh) if saved_a is not None else (fresh, saved)
        result, task_name = compare_runs(*sides), saved["task"]
    if sides is not None:
        warning = different_cards(*sides)
        if warning:
            _say(notices, f"warning: {warning}")
    result.update(a=str(a) if not isinstance(a, dict) else a.get("submission", "A"),
                  b=str(b) if not isinstance(b, dict) else b.get("submission", "B"), task=task_name)
    return result


def _saved(x, load_result) -> dict | None:
    """A run record from a dict or a saved result's path (``.json``, or ``.json:NAME``); None for a folder."""
    if isinstance(x, dict):
        return load_result(x)
    text = str(x)
    if text.endswith(".json") or ".json:" in text:
        return load_result(text)
    return None


def _say(notices: list[str] | None, text: str) -> None:
    if notices is not None and text not in notices:
        notices.append(text)
