"""The command line: a thin layer over kbench's Python API."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .cli_common import (RUN_OPTIONS, Progress, UsageProblem, check_paths, detect, given, notice, options,
                         resolve_device, run, run_options, run_scaled, wide_option, write)
from . import worker_env
from .compare import compare_interleaved, compare_runs, different_cards, load_result, regressed
from .errors import KbenchError
from .report import compare_report, markdown_report, text_report
from .tables import hidden_note, lines, render
from .tasks import all_tasks, get_task


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kbench")
def cli():
    """kbench: is this GPU kernel correct, and how fast is it against its baseline?

    \b
    Example:
        kbench eval submissions/qknorm --suite quick --json runs/1.json
    """
    # Done first by kbench/launch.py; again here for a caller of this group (CliRunner, scripts).
    worker_env.take_from_process()


def _echo_table(headers, rows, wide: bool, **kw) -> None:
    table, hidden = render(headers, rows, wide=wide, **kw)
    click.echo(table)
    if hidden:
        click.echo(hidden_note(hidden))


@cli.command(name="list")
@wide_option
def list_tasks(wide):
    """List the tasks and their suites with case counts.

    \b
    Example:
        kbench list
    """
    rows, broken = [], []
    for name, task in all_tasks().items():
        try:
            suites = ", ".join(f"{s.name} ({len(s.cases)})" for s in task.suites.values())
            rows.append([name, suites, task.description])
        except KbenchError as exc:   # one broken task folder: the others are still listed
            rows.append([name, "-", "cannot be loaded (below)"])
            broken.append(f"task {name}: {exc}")
    _echo_table(["task", "suites (cases)", "description"], rows, wide, wrap=("suites (cases)", "description"))
    for line in broken:
        notice(line)
    if broken:
        sys.exit(1)


@cli.command()
@click.argument("task_name", metavar="TASK")
@click.option("--suite", default=None, help="Only this suite (default: all).")
@wide_option
def show(task_name, suite, wide):
    """Show a task's suites and their cases (parameters the same in every case on one line).

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
        click.echo(lines(f"{s.name}: {len(s.cases)} cases, devices {'/'.join(s.devices)}: {s.reason}", wide))
        keys = sorted({k for c in s.cases for k in c.params})
        same = {} if wide or len(s.cases) < 2 else {
            k: s.cases[0].params.get(k) for k in keys if len({repr(c.params.get(k)) for c in s.cases}) == 1}
        same.update({k: "the case's name" for k in keys
                     if not wide and k not in same and all(c.params.get(k) == c.name for c in s.cases)})
        if same:
            click.echo(lines("every case: " + ", ".join(f"{k}={v}" for k, v in same.items())))
            keys = [k for k in keys if k not in same]
        _echo_table(["case"] + keys, [[c.name] + [c.params.get(k, "") for k in keys] for c in s.cases], wide,
                    numbers=True)
        click.echo()


@cli.command(name="eval")
@click.argument("submissions", nargs=-1, required=True, type=click.Path(path_type=Path))
@run_options
@click.option("--baseline", help="Baseline to compare with (default: the task's first; 'none' to skip).")
@click.option("--min-speedup", type=float,
              help="Fail (exit 1) below this geometric-mean speedup (not judged in CPU mode).")
@click.option("--gpus", metavar="all|N|0,1",
              help="Spread the cases of every submission over this host's GPUs (all, the first N, "
                   "or these): one child process per GPU, each case's baseline and submission timed "
                   "on the same GPU. Same output as a one-GPU run, each case naming its GPU.")
@click.option("--ray", "ray_address", metavar="auto|ADDRESS",
              help="The same work as Ray tasks (one GPU each; one CPU in CPU mode) on a cluster: auto "
                   "finds one (RAY_ADDRESS, or the last started here) or starts one on this host. "
                   'Needs pip install "kbench[ray]".')
def eval_cmd(submissions, baseline, min_speedup, gpus, ray_address, **kw):
    """Check a submission's outputs on every case of a suite and time it against the baseline.

    Exit code 0 when every case passed (and the geomean speedup is at least
    --min-speedup), 1 when a case failed, was flagged or fell short, 2 on a usage error,
    3 when cases have no verdict because a GPU or a node was lost (not the submission's
    failure; the missing cases are named).

    \b
    Example:
        kbench eval submissions/qknorm --suite quick --json runs/12.json --min-speedup 1.2
        kbench eval submissions/qknorm my_kernel other_kernel --gpus all   # ranked, over every GPU
    """
    check_paths(submissions)
    progress = Progress(kw["quiet"])
    device = resolve_device(kw["device"], progress)
    runs = []
    if gpus is not None or ray_address is not None:
        runs = run_scaled(kw["task_name"], submissions, options(kw, device, progress, baseline=baseline),
                          gpus, ray_address)
    for i, path in enumerate(submissions):
        result = runs[i] if i < len(runs) else run(kw["task_name"], path, options(
            kw, device, progress, baseline=baseline, warm_next=i + 1 < len(submissions)))
        if len(submissions) > 1:
            click.echo(f"\n== {path}" if i else f"== {path}")
        click.echo(text_report(result, wide=kw["wide"]))
        if i >= len(runs):
            runs.append(result)
    if len(runs) > 1:
        click.echo("\n" + ranking(runs, kw["wide"]))
    write(kw, runs[0] if len(runs) == 1 else {"runs": runs}, "\n".join(markdown_report(r) for r in runs))
    if min_speedup is not None and device != "cuda":
        notice("--min-speedup not judged: CPU-mode timings are not meaningful")
        min_speedup = None
    sys.exit(max(exit_code(r, min_speedup) for r in runs))


@cli.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@run_options
@click.option("--fail-if-slower", "fail_pct", type=float, metavar="PCT",
              help="Also exit 1 when B is slower than A by more than PCT percent with 95% "
                   "family-wise confidence: Holm's step-down over the geomean and every case "
                   "(CUDA timings only; CPU mode judges statuses alone).")
@click.option("--normalize", is_flag=True,
              help="Two saved results: take B/A against the baseline each timed beside the "
                   "submission (cancels a drift of the card; adds the baseline's own noise).")
def compare(a, b, fail_pct, normalize, **kw):
    """Compare B against A: per-case FASTER / SLOWER / SAME / UNSURE from both medians' spread.

    A and B are each a saved result (kbench eval --json) or a submission folder. Two
    folders are timed interleaved on the same inputs in one run, so drift hits both. Exit
    code 1 when B fails a case (or, with --fail-if-slower, is slower), 2 on a usage error.
    CPU-mode timings are not meaningful: there only the statuses are compared.

    \b
    Example:
        kbench compare runs/best.json runs/12.json --fail-if-slower 3
        kbench compare submissions/qknorm my_kernel --suite quick
    """
    check_paths((a, b))
    json_a, json_b = a.suffix == ".json", b.suffix == ".json"
    progress = Progress(kw["quiet"])
    try:
        if json_a and json_b:
            saved_a, saved_b = load_result(a), load_result(b)
            ignored = given(RUN_OPTIONS)
            if ignored:
                notice(f"ignored with two saved results (nothing is run): {', '.join(ignored)}")
            result, task = compare_runs(saved_a, saved_b, normalize), saved_a["task"]
            warn_cards(saved_a, saved_b)
        else:
            if not json_a and not json_b:
                device = resolve_device(kw["device"], progress)
                fresh = run(kw["task_name"] or _task_of(a, b), b, options(kw, device, progress, baseline_path=a))
                result, task = compare_interleaved(fresh), fresh["task"]
            else:
                saved_path, folder = (a, b) if json_a else (b, a)
                saved = load_result(saved_path)
                _same_task(saved, saved_path, folder, kw["task_name"])
                device = resolve_device(kw["device"], progress)
                timing = saved.get("timing", {})
                connections = kw["cuda_connections"]
                if connections is None and device == "cuda":
                    connections = timing.get("cuda_connections")
                # like with like: the saved run's suite, seed and (on a GPU) CUDA connections
                kw = {**kw, "suite": kw["suite"] or saved["suite"], "task_name": saved["task"],
                      "seed": kw["seed"] if kw["seed"] is not None else timing.get("root_seed"),
                      "cuda_connections": connections}
                fresh = run(saved["task"], folder, options(kw, device, progress, baseline="none"))
                result = compare_runs(saved, fresh) if json_a else compare_runs(fresh, saved)
                warn_cards(*((saved, fresh) if json_a else (fresh, saved)))
                task = saved["task"]
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None
    if normalize and not (json_a and json_b):
        notice("--normalize ignored: it takes two saved results")
    result.update(a=str(a), b=str(b), task=task)
    result["summary"]["fail_if_slower"] = fail_pct
    click.echo(compare_report(result, wide=kw["wide"]))
    write(kw, result, compare_report(result, markdown=True))
    reasons = regressed(result, fail_pct)
    for reason in reasons:
        notice(f"regression: {reason}")
    sys.exit(1 if reasons else 0)


def warn_cards(a: dict, b: dict) -> None:
    warning = different_cards(a, b)
    if warning:
        notice(f"warning: {warning}")


def _same_task(saved: dict, saved_path: Path, folder: Path, task_name: str | None) -> None:
    """A saved result is compared only with a submission of its own task."""
    if task_name and task_name != saved["task"]:
        raise UsageProblem(f"--task {task_name}, but {saved_path} is a {saved['task']} result")
    if not task_name:
        found = detect(folder).name
        if found != saved["task"]:
            raise UsageProblem(f"{folder} is a {found} submission but {saved_path} is a {saved['task']} result")


def _task_of(a: Path, b: Path) -> str:
    ta, tb = detect(a).name, detect(b).name
    if ta != tb:
        raise UsageProblem(f"{a} is a {ta} submission but {b} is {tb}")
    return ta


def ranking(runs: list[dict], wide: bool = False) -> str:
    timed = all(r["timing"]["meaningful"] for r in runs)
    order = sorted(runs, key=lambda r: (-(r["summary"]["passed"] == r["summary"]["total"]),
                                        -((r["summary"]["geomean_speedup"] or 0) if timed else 0)))
    rows = [[i + 1, r["submission"], f"{r['summary']['passed']}/{r['summary']['total']}"
             + (f" ({r['summary']['lost']} lost)" if r["summary"].get("lost") else "")]
            + ([] if not timed else ["-" if r["summary"]["geomean_speedup"] is None
                                     else f"{r['summary']['geomean_speedup']:.3f}x"])
            for i, r in enumerate(order)]
    headers = ["rank", "submission", "passed"] + (["geomean speedup"] if timed else [])
    table, hidden = render(headers, rows, wide=wide)
    return "\n".join([table] + ([hidden_note(hidden)] if hidden else []))


EXIT_INCOMPLETE = 3   # cases lost with a GPU or node: no verdict, not the submission's failure


def exit_code(run: dict, min_speedup: float | None) -> int:
    s = run["summary"]
    lost = s.get("lost", 0)
    if s["passed"] + lost < s["total"] or s["flagged"] or s.get("fatal"):
        return 1
    if lost:
        missing = [c["case"] for c in run["cases"] if c["status"] == "lost"]
        notice(f"{run['submission']}: {lost} case{'s' if lost > 1 else ''} lost (infrastructure, "
               f"no verdict): {', '.join(missing)}")
        return EXIT_INCOMPLETE
    if min_speedup is not None:
        g = s["geomean_speedup"]
        if g is None or g < min_speedup:
            notice(f"geomean speedup {g if g is not None else 'n/a'} is below --min-speedup {min_speedup}")
            return 1
    return 0


def main():
    cli(prog_name="kbench")
