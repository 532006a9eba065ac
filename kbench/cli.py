"""The command line: a thin layer over kbench's Python API."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from tabulate import tabulate

from .errors import KbenchError
from .compare import compare_interleaved, compare_runs, load_result, regressed
from .report import compare_report, markdown_report, text_report
from .runner import Options, evaluate
from .tasks import all_tasks, detect_task, get_task
from .timing import StopRule


class UsageProblem(click.ClickException):
    """A user mistake: one line on stderr, exit code 2."""

    exit_code = 2


def _default_device(requested: str) -> str:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageProblem("--device cuda asked for, but no CUDA device is available")
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    click.echo("kbench: no CUDA device: CPU mode (Triton interpreter, correctness only)", err=True)
    return "cpu"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kbench")
def cli():
    """kbench: is this GPU kernel correct, and how fast is it against its baseline?

    \b
    Example:
        kbench eval submissions/qknorm --suite quick --json runs/1.json
    """


@cli.command(name="list")
def list_tasks():
    """List the tasks and their suites with case counts.

    \b
    Example:
        kbench list
    """
    rows = []
    for name, task in all_tasks().items():
        suites = ", ".join(f"{s.name} ({len(s.cases)})" for s in task.suites.values())
        rows.append([name, suites, task.description])
    click.echo(tabulate(rows, ["task", "suites (cases)", "description"], tablefmt="simple"))


@cli.command()
@click.argument("task_name", metavar="TASK")
@click.option("--suite", default=None, help="Only this suite (default: all).")
def show(task_name, suite):
    """Show a task's suites and their cases.

    \b
    Example:
        kbench show qknorm --suite full
    """
    try:
        task = get_task(task_name)
        suites = [task.suite(suite)] if suite else list(task.suites.values())
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    for s in suites:
        click.echo(f"{s.name}: {len(s.cases)} cases, devices {'/'.join(s.devices)}: {s.reason}")
        keys = sorted({k for c in s.cases for k in c.params})
        rows = [[c.name] + [c.params.get(k, "") for k in keys] for c in s.cases]
        click.echo(tabulate(rows, ["case"] + keys, tablefmt="simple"))
        click.echo()


def _progress(quiet: bool):
    if quiet or not sys.stderr.isatty():
        return None
    return lambda text: click.echo(f"\r\033[Kkbench: {text}", err=True, nl=False)


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
                     help="Seconds of timing per case."),
        click.option("--min-samples", type=int, default=StopRule.min_samples, show_default=True),
        click.option("--max-samples", type=int, default=StopRule.max_samples, show_default=True),
        click.option("--cuda-graph", is_flag=True,
                     help="Time CUDA-graph replays of each call (for launch-bound kernels; labelled)."),
        click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
        click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the results as JSON."),
        click.option("--markdown", "md_path", type=click.Path(path_type=Path),
                     help="Append a Markdown summary (e.g. to $GITHUB_STEP_SUMMARY)."),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def _options(kw: dict, device: str, **extra) -> Options:
    if kw["cuda_graph"] and device != "cuda":
        raise UsageProblem("--cuda-graph needs a CUDA device")
    budget, min_samples, max_samples = kw["budget"], kw["min_samples"], kw["max_samples"]
    if device == "cpu":  # timings are not meaningful there: a few calls are enough
        budget, min_samples, max_samples = min(budget, 1.0), min(min_samples, 3), min(max_samples, 3)
    return Options(suite=kw["suite"] or ("quick" if device == "cuda" else "smoke"), device=device,
                   only=kw["only"] or None, timeout=kw["timeout"], seed=kw["seed"],
                   stop=StopRule(noise=kw["noise"], min_samples=min_samples, max_samples=max_samples,
                                 budget_s=budget),
                   cuda_graph=kw["cuda_graph"], progress=_progress(kw["quiet"]), **extra)


def _run(task_name, path: Path, options: Options) -> dict:
    try:
        task = get_task(task_name) if task_name else detect_task(path)
        run = evaluate(task, path, options)
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    if options.progress:
        click.echo("\r\033[K", err=True, nl=False)
    return run


def _check_paths(paths) -> None:
    for path in paths:
        if not path.exists():
            raise UsageProblem(f"{path}: no such file or directory")


@cli.command(name="eval")
@click.argument("submissions", nargs=-1, required=True, type=click.Path(path_type=Path))
@run_options
@click.option("--baseline", help="Baseline to compare with (default: the task's first; 'none' to skip).")
@click.option("--min-speedup", type=float, help="Fail (exit 1) below this geometric-mean speedup.")
def eval_cmd(submissions, baseline, min_speedup, **kw):
    """Check a submission's outputs on every case of a suite and time it against the baseline.

    Exit code 0 when every case passed (and the geomean speedup is at least
    --min-speedup), 1 when a case failed, was flagged or fell short, 2 on a usage error.

    \b
    Example:
        kbench eval submissions/qknorm --suite quick --json runs/12.json --min-speedup 1.2
    """
    _check_paths(submissions)
    device = _default_device(kw["device"])
    runs = []
    for path in submissions:
        run = _run(kw["task_name"], path, _options(kw, device, baseline=baseline))
        click.echo(text_report(run))
        runs.append(run)
    if len(runs) > 1:
        click.echo("\n" + ranking(runs))
    _write(kw, runs[0] if len(runs) == 1 else {"runs": runs}, "\n".join(markdown_report(r) for r in runs))
    sys.exit(max(exit_code(r, min_speedup) for r in runs))


def _write(kw: dict, payload: dict, markdown: str) -> None:
    if kw["json_path"]:
        kw["json_path"].parent.mkdir(parents=True, exist_ok=True)
        kw["json_path"].write_text(json.dumps(payload, indent=1))
    if kw["md_path"]:
        with open(kw["md_path"], "a") as f:
            f.write(markdown)


@cli.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@run_options
@click.option("--fail-if-slower", "fail_pct", type=float,
              help="Exit 1 when B is significantly slower than A by more than this percent "
                   "(on the geomean or any case), or when B fails a case.")
@click.option("--normalize", is_flag=True,
              help="Two saved results: take B/A against the baseline each timed beside the "
                   "submission (cancels a drift of the card; adds the baseline's own noise).")
def compare(a, b, fail_pct, normalize, **kw):
    """Compare B against A: per-case FASTER / SLOWER / SAME / UNSURE from both medians' spread.

    A and B are each a saved result (kbench eval --json) or a submission folder. Two
    folders are timed interleaved on the same inputs in one run, so drift hits both.

    \b
    Example:
        kbench compare runs/best.json runs/12.json --fail-if-slower 3
        kbench compare submissions/qknorm my_kernel --suite quick
    """
    _check_paths((a, b))
    json_a, json_b = a.suffix == ".json", b.suffix == ".json"
    try:
        if json_a and json_b:
            result = compare_runs(load_result(a), load_result(b), normalize)
            task = load_result(a)["task"]
        elif not json_a and not json_b:
            device = _default_device(kw["device"])
            run = _run(kw["task_name"] or _task_of(a, b), b, _options(kw, device, baseline_path=a))
            result, task = compare_interleaved(run), run["task"]
        else:
            saved = load_result(a if json_a else b)
            kw = {**kw, "suite": kw["suite"] or saved["suite"], "task_name": saved["task"],
                  "seed": kw["seed"] if kw["seed"] is not None else saved.get("timing", {}).get("root_seed")}
            device = _default_device(kw["device"])
            fresh = _run(saved["task"], b if json_a else a, _options(kw, device, baseline="none"))
            result = compare_runs(saved, fresh) if json_a else compare_runs(fresh, saved)
            task = saved["task"]
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    result.update(a=str(a), b=str(b), task=task)
    click.echo(compare_report(result))
    _write(kw, result, compare_report(result, markdown=True))
    reasons = regressed(result, fail_pct) if fail_pct is not None else []
    for reason in reasons:
        click.echo(f"kbench: regression: {reason}", err=True)
    sys.exit(1 if reasons else 0)


def _task_of(a: Path, b: Path) -> str:
    try:
        ta, tb = detect_task(a).name, detect_task(b).name
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    if ta != tb:
        raise UsageProblem(f"{a} is a {ta} submission but {b} is {tb}")
    return ta


def ranking(runs: list[dict]) -> str:
    order = sorted(runs, key=lambda r: (-(r["summary"]["passed"] == r["summary"]["total"]),
                                        -(r["summary"]["geomean_speedup"] or 0)))
    rows = [[i + 1, r["submission"], f"{r['summary']['passed']}/{r['summary']['total']}",
             "-" if r["summary"]["geomean_speedup"] is None else f"{r['summary']['geomean_speedup']:.3f}x"]
            for i, r in enumerate(order)]
    return tabulate(rows, ["rank", "submission", "passed", "geomean speedup"], tablefmt="simple")


def exit_code(run: dict, min_speedup: float | None) -> int:
    s = run["summary"]
    if s["passed"] < s["total"] or s["flagged"] or s.get("fatal"):
        return 1
    if min_speedup is not None:
        g = s["geomean_speedup"]
        if g is None or g < min_speedup:
            click.echo(f"kbench: geomean speedup {g if g is not None else 'n/a'} is below "
                       f"--min-speedup {min_speedup}", err=True)
            return 1
    return 0


def main():
    cli(prog_name="kbench")
