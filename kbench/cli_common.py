"""What the commands share: options, the device, progress and notices, running one submission."""
from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path

import click

from .errors import KbenchError
from .launch import DEFAULT_PROCESSES
from .runner import Options, evaluate
from .suites import select_cases
from .tasks import Task, detect_task, get_task, submission_file
from .timing import StopRule

# CPU mode: timings are not meaningful there, a few calls are enough
CPU_CAPS = {"budget": 1.0, "min_samples": 3, "max_samples": 3, "processes": 1}
RUN_OPTIONS = ("task_name", "suite", "only", "device", "seed", "timeout", "noise", "budget", "min_samples",
               "max_samples", "cuda_graph", "processes", "pool", "cuda_connections")


class UsageProblem(click.ClickException):
    """A user mistake: one line on stderr, exit code 2."""

    exit_code = 2


def notice(text: str) -> None:
    click.echo(f"kbench: {text}", err=True)


def wide_option(fn):
    return click.option("--wide", is_flag=True, help="Every column, however wide (default: fit 100 columns).")(fn)


def run_options(fn):
    """Options shared by the commands that run submissions (eval, compare)."""
    decorators = [
        click.option("--task", "task_name", help="Task name (default: from the folder name or entry points)."),
        click.option("--suite", help="Suite to run (default: quick on a GPU, smoke on CPU)."),
        click.option("--case", "only", multiple=True, help="Run only this case (repeatable)."),
        click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True),
        click.option("--seed", type=int, envvar="KBENCH_SEED",
                     help="Root seed: every case gets a hidden seed from it (catches hard-coded cases)."),
        click.option("--timeout", type=float, default=120.0, show_default=True,
                     help="Seconds any one call to a worker may take (loading plus setup gets 120 more)."),
        click.option("--noise", type=float, default=StopRule.noise, show_default=True,
                     help="Stop sampling a case once the median's relative standard error is below this."),
        click.option("--budget", type=float, default=StopRule.budget_s, show_default=True,
                     help="Seconds of timing per case (CPU mode: at most 1)."),
        click.option("--min-samples", type=int, default=StopRule.min_samples, show_default=True),
        click.option("--max-samples", type=int, default=StopRule.max_samples, show_default=True,
                     help="CPU mode: at most 3."),
        click.option("--processes", type=click.IntRange(1, 8), default=DEFAULT_PROCESSES, show_default=True,
                     help="Worker processes per submission and baseline that time each case; its figure is "
                          "the mean of their medians, its interval includes their spread (CUDA only; CPU "
                          "mode uses one)."),
        click.option("--pool", type=click.IntRange(1, 8), default=None,
                     help="Worker processes per submission and baseline in all (default: the task's GPU_POOL, "
                          "else --processes): each "
                          "case goes to the next --processes of them round the pool, so a suite's geomean "
                          "averages more processes at the same cost a case (CUDA only)."),
        click.option("--cuda-graph", is_flag=True,
                     help="Time CUDA-graph replays of each call (for launch-bound kernels; labelled)."),
        click.option("--cuda-connections", type=click.IntRange(1, 32), default=None,
                     help="CUDA_DEVICE_MAX_CONNECTIONS in every worker (default: CUDA's 8, whatever the "
                          "environment says). "
                          "1 starts each worker's CUDA context several times faster (ranking many "
                          "single-stream kernels) but puts all streams in one hardware queue: a "
                          "multi-stream kernel loses its overlap and a missing wait between streams "
                          "goes unseen. Recorded; compare warns when A and B differ."),
        click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
        click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the results as JSON."),
        click.option("--markdown", "md_path", type=click.Path(path_type=Path),
                     help="Append a Markdown summary (e.g. to $GITHUB_STEP_SUMMARY)."),
        wide_option,
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def given(names) -> list[str]:
    """The options among ``names`` the user set (not left at their default), as typed."""
    ctx = click.get_current_context()
    out = []
    for param in ctx.command.params:
        if param.name in names and ctx.get_parameter_source(param.name) not in (
                click.core.ParameterSource.DEFAULT, None):
            out.append(max(param.opts, key=len))
    return out


class Progress:
    """stderr while a run goes: notices first (said once, when the first case starts, so a
    usage error is never preceded by them), then on a terminal a live line per case, on a
    pipe a line at most every ``interval`` seconds (a long CPU run is not silent in CI)."""

    def __init__(self, quiet: bool, interval: float = 10.0, clock=time.monotonic, stream=None):
        self.quiet, self.interval, self.clock = quiet, interval, clock
        self.stream = stream if stream is not None else sys.stderr
        self.notices: list[str] = []
        self.last: float | None = None
        self.live = False

    def __call__(self, text: str) -> None:
        for line in self.notices:
            notice(line)
        self.notices = []
        if self.quiet:
            return
        if self.stream.isatty():
            click.echo(f"\r\033[Kkbench: {text}", err=True, nl=False)
            self.live = True
            return
        now = self.clock()
        if self.last is None:
            self.last = now
        elif now - self.last >= self.interval:
            self.last = now
            click.echo(f"kbench: {text}", err=True)

    def done(self) -> None:
        if self.live:
            click.echo("\r\033[K", err=True, nl=False)
            self.live = False


def resolve_device(requested: str, progress: Progress) -> str:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageProblem("--device cuda asked for, but no CUDA device is available")
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    progress.notices.append("no CUDA device: CPU mode (Triton interpreter, correctness only)")
    return "cpu"


def options(kw: dict, device: str, progress: Progress, **extra) -> Options:
    if kw["cuda_graph"] and device != "cuda":
        raise UsageProblem("--cuda-graph needs a CUDA device")
    if kw["cuda_connections"] is not None and device != "cuda":
        raise UsageProblem("--cuda-connections needs a CUDA device")
    stop = {k: kw[k] for k in CPU_CAPS}
    if device == "cpu":
        capped = [f"--{k.replace('_', '-')} {CPU_CAPS[k]:g}" for k in CPU_CAPS
                  if f"--{k.replace('_', '-')}" in given(CPU_CAPS) and kw[k] > CPU_CAPS[k]]
        stop = {k: min(v, CPU_CAPS[k]) for k, v in stop.items()}
        line = f"CPU mode: capped to {', '.join(capped)} (timings are not meaningful there)"
        if capped and line not in progress.notices:
            progress.notices.append(line)
    return Options(suite=kw["suite"] or ("quick" if device == "cuda" else "smoke"), device=device,
                   only=kw["only"] or None, timeout=kw["timeout"], seed=kw["seed"],
                   stop=StopRule(noise=kw["noise"], min_samples=stop["min_samples"],
                                 max_samples=stop["max_samples"], budget_s=stop["budget"]),
                   cuda_graph=kw["cuda_graph"], cuda_connections=kw["cuda_connections"],
                   processes=stop["processes"],
                   pool=None if device == "cpu" else kw["pool"], progress=progress, **extra)


def detect(path: Path) -> Task:
    """The task of a submission folder or file; a file that does not parse is named, not hidden."""
    try:
        return detect_task(path)
    except KbenchError as exc:
        files = [path] if path.is_file() else sorted(path.glob("*.py"))
        for f in files:
            try:
                ast.parse(f.read_text(errors="replace"), str(f))
            except SyntaxError as err:
                raise UsageProblem(f"cannot tell the task of {path}: {f.name} line {err.lineno}: "
                                   f"SyntaxError: {err.msg}") from None
        raise UsageProblem(str(exc)) from None


def run(task_name: str | None, path: Path, opts: Options) -> dict:
    """Evaluate one submission; every usage mistake a one-line UsageProblem."""
    task = _checked_task(task_name, path, opts)
    try:
        result = evaluate(task, path, opts)
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    opts.progress.done()
    return result


def run_scaled(task_name: str | None, paths, opts: Options, gpus: str | None, ray_address: str | None) -> list[dict]:
    """Evaluate several submissions over this host's GPUs (``gpus``) or a Ray cluster."""
    if gpus is not None and ray_address is not None:
        raise UsageProblem("--gpus and --ray: give one (--ray runs on the GPUs of a cluster's hosts)")
    tasks = {p: _checked_task(task_name, p, opts) for p in paths}
    names = {t.name for t in tasks.values()}
    if len(names) > 1:
        raise UsageProblem(f"submissions of different tasks ({', '.join(sorted(names))}): "
                           f"one task per scaled-out run")
    task = next(iter(tasks.values()))
    try:
        if gpus is not None:
            from .gpu_pool import run_on_gpus, visible_gpus
            from .gpu_slots import parse_gpus

            if opts.device != "cuda":
                raise UsageProblem("--gpus needs CUDA GPUs and this run is on CPU "
                                   "(CPU workers on a local cluster: --ray auto)")
            try:
                indices = parse_gpus(gpus, visible_gpus())
            except ValueError as exc:
                raise UsageProblem(str(exc)) from None
            runs = run_on_gpus(task, list(paths), opts, indices)
        else:
            from .ray_pool import run_on_ray

            runs = run_on_ray(task, list(paths), opts, ray_address)
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    opts.progress.done()
    return runs


def _checked_task(task_name: str | None, path: Path, opts: Options) -> Task:
    """The task of a submission, its suite and cases checked; every mistake a UsageProblem."""
    task = None
    try:
        task = get_task(task_name) if task_name else detect(path)
        suite = task.suite(opts.suite)
        select_cases(suite, opts.only)
    except KbenchError as exc:
        if opts.only and task is not None and str(exc).startswith("no case"):
            missing = next(n for n in opts.only if n not in {c.name for c in suite.cases})
            raise UsageProblem(f"no case {missing!r} in suite {suite.name!r} of {task.name} "
                               f"(see: kbench show {task.name} --suite {suite.name})") from None
        raise UsageProblem(str(exc)) from None
    if opts.device not in suite.devices:
        raise UsageProblem(f"suite {suite.name!r} of {task.name} needs {' or '.join(suite.devices)}; "
                           f"this run is on {opts.device}")
    try:
        submission_file(task, path)
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    return task


def check_paths(paths) -> None:
    for path in paths:
        if not path.exists():
            raise UsageProblem(f"{path}: no such file or directory")


def write(kw: dict, payload: dict, markdown: str) -> None:
    if kw["json_path"]:
        kw["json_path"].parent.mkdir(parents=True, exist_ok=True)
        kw["json_path"].write_text(json.dumps(payload, indent=1))
    if kw["md_path"]:
        with open(kw["md_path"], "a") as f:
            f.write(markdown)
