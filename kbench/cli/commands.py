"""The command line: click commands over kbench's Python API (kbench/api.py)."""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import click

from kbench import api
from kbench.cli import plot as charts
from kbench.cli.report import (
    Progress,
    compare_report,
    hidden_note,
    lines,
    markdown_report,
    notice,
    ranking,
    render,
    text_report,
)
from kbench.errors import KbenchError
from kbench.stats.compare import regressed
from kbench.stats.estimates import DEFAULT_PROCESSES, StopRule
from kbench.tasks.task import all_tasks, get_task, task_dir_problems

# What the commands share: options, the device, progress and notices, running one submission.

RUN_OPTIONS = ("task_name", "suite", "only", "device", "seed", "timeout", "noise", "budget", "min_samples",
               "max_samples", "cuda_graph", "processes", "pool", "cuda_connections")


class UsageProblem(click.ClickException):
    """A user mistake: one line on stderr, exit code 2."""

    exit_code = 2


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
                     help="Seconds any one call to a worker may take (loading plus setup gets 120 more). "
                          "Once a submission has timed out without answering any call, each later case's "
                          "first call gets 50x the reference's time there, at least 3 s (one that hangs "
                          "everywhere costs ~2.5 min on smoke); those cases run again in full if it answers."),
        click.option("--noise", type=float, default=StopRule.noise, show_default=True,
                     help="Stop sampling a case once the median's relative standard error is below this."),
        click.option("--budget", type=float, default=StopRule.budget_s, show_default=True,
                     help="Seconds of timing per case (CPU mode: at most 1)."),
        click.option("--min-samples", type=int, default=StopRule.min_samples, show_default=True),
        click.option("--max-samples", type=int, default=StopRule.max_samples, show_default=True,
                     help="CPU mode: at most 3."),
        click.option("--processes", type=click.IntRange(1, 16), default=DEFAULT_PROCESSES, show_default=True,
                     help="Worker processes per submission and baseline that time each case; its figure is "
                          "the mean of their medians, its interval includes their spread (CUDA only; CPU "
                          "mode uses one)."),
        click.option("--pool", type=click.IntRange(1, 16), default=None,
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


STOP_OPTIONS = {"budget_s": "budget", "min_samples": "min_samples", "max_samples": "max_samples"}


def settings(kw: dict, **extra) -> dict:
    """The API's settings (kbench/api.py) from the run options as typed."""
    typed = given(STOP_OPTIONS.values())
    return {**dict(device=kw["device"], suite=kw["suite"], cases=kw["only"], seed=kw["seed"], timeout=kw["timeout"],
                   noise=kw["noise"], processes=kw["processes"], pool=kw["pool"],
                   cuda_graph=kw["cuda_graph"], cuda_connections=kw["cuda_connections"]),
            # the stop rule's options only where given: the API caps those in CPU mode, and says so
            **{name: kw[option] for name, option in STOP_OPTIONS.items() if f"--{option.replace('_', '-')}" in typed},
            **extra}


@contextmanager
def one_line_usage():
    """click's usage errors (a bad option or value, a missing argument) as one line, naming the help."""
    try:
        yield
    except click.UsageError as exc:
        if exc.ctx is None:
            raise
        short = UsageProblem(f"{exc.format_message()} (see: {exc.ctx.command_path} --help)")
        raise short from None


class Commands(click.Group):
    def make_context(self, *args, **kwargs):
        with one_line_usage():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with one_line_usage():
            return super().invoke(ctx)


@contextmanager
def usage_errors():
    """A KbenchError from the API is the user's mistake: one line on stderr, exit 2."""
    try:
        yield
    except KbenchError as exc:
        raise UsageProblem(str(exc)) from None


def saved_result(path: Path) -> bool:
    return path.suffix == ".json" or ".json:" in str(path)


def check_paths(paths) -> None:
    for path in paths:
        on_disk = Path(str(path).rsplit(":", 1)[0]) if ".json:" in str(path) else path
        try:
            if not on_disk.exists():
                raise UsageProblem(f"{on_disk}: no such file or directory")
        except OSError as exc:   # a name too long, a loop of links
            raise UsageProblem(f"{on_disk}: {exc.strerror}") from None


def check_outputs(kw: dict, *charts_at) -> None:
    """--json, --markdown and ``charts_at``, checked before the run: a path that cannot be written would lose it."""
    outputs = [(o, p) for o, p in (("--json", kw.get("json_path")), ("--markdown", kw.get("md_path")), *charts_at) if p]
    for option, path in outputs:
        try:
            if path.is_dir():
                raise UsageProblem(f"{option} {path}: is a folder; give a file's path")
            existing = next(p for p in (path, *path.parents) if p.exists())
        except OSError as exc:
            raise UsageProblem(f"{option} {path}: {exc.strerror}") from None
        if existing != path and not existing.is_dir():
            raise UsageProblem(f"{option} {path}: {existing} is a file, not a folder")
        if not os.access(existing if existing != path else path, os.W_OK):
            raise UsageProblem(f"{option} {path}: not writable")
        same = [o for o, p in outputs if o != option and p.resolve() == path.resolve()]
        if same:
            raise UsageProblem(f"{option} and {same[0]} name the same file, {path}: give each its own")
    for option, path in charts_at:   # a KbenchError: the caller's usage_errors() makes it one line
        charts.check_output(option, path)


def write(kw: dict, payload: dict, markdown: str) -> None:
    """The saved results; a failure to write them is one line and exit 2 (the table is printed)."""
    for option, path, text, mode in (("--json", kw["json_path"], json.dumps(payload, indent=1), "w"),
                                      ("--markdown", kw["md_path"], markdown, "a")):
        if path is None:
            continue
        try:
            if not path.parent.exists():
                path.parent.mkdir(parents=True)
                notice(f"{option}: made the folder {path.parent}")
            with open(path, mode) as f:
                f.write(text)
        except OSError as exc:
            notice(f"{option} {path}: not written: {exc.strerror or exc}")
            sys.exit(2)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kbench")
def cli():
    """kbench: is this GPU kernel correct, and how fast is it against its baseline?

    \b
    Example:
        kbench eval submissions/qknorm --suite quick --json runs/1.json
    """
    for line in task_dir_problems():   # a folder named there that holds no task is said, not skipped silently
        notice(line)


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
@click.option("--baseline", help="Baseline to time beside the submission (default: the best installed: "
                                  "flashinfer for qknorm and mla_decode, else torch / the eager reference; "
                                  "FlexAttention for block_sparse_attn; 'none' to skip).")
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
    failure; the missing cases are named), 130 when interrupted (143 on SIGTERM).

    The baseline is the best one installed (flashinfer where it is; --baseline picks
    another), named in the summary line.

    \b
    Example:
        kbench eval submissions/qknorm --suite quick --json runs/12.json --min-speedup 1.2
        kbench eval submissions/qknorm my_kernel other_kernel --gpus all   # ranked, over every GPU
    """
    check_paths(submissions)
    check_outputs(kw)
    progress = Progress(kw["quiet"])
    with usage_errors():
        for path in submissions:   # a usage mistake answered before torch is imported
            api.task_of(path, kw["task_name"])
        device = api.resolve_device(kw["device"], progress.notices)
        run = settings(kw, baseline=baseline, progress=progress, notices=progress.notices, device=device)
        if len(submissions) > 1:   # every submission's task and cases, before the first one runs
            api.one_task(submissions, kw["task_name"], api.options(**{**run, "notices": None, "progress": None}))
        runs = []
        if gpus is not None or ray_address is not None:
            runs = api.evaluate_many(submissions, task=kw["task_name"], gpus=gpus, ray=ray_address, **run)
            progress.done()
    for i, path in enumerate(submissions):
        if i >= len(runs):   # one after another: each reported as it ends
            with usage_errors():
                runs.append(api.evaluate(path, task=kw["task_name"], warm_next=i + 1 < len(submissions), **run))
            progress.done()
        if len(submissions) > 1:
            click.echo(f"\n== {path}" if i else f"== {path}")
        click.echo(text_report(runs[i], wide=kw["wide"]))
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
@click.option("--plot", "plot_path", metavar="FILE", type=click.Path(path_type=Path), help=charts.PLOT_HELP)
@usage_errors()
def compare(a, b, fail_pct, normalize, plot_path, **kw):
    """Compare B against A: per-case FASTER / SLOWER / SAME / UNSURE from both medians' spread.

    A and B are each a saved result (kbench eval --json; FILE.json:NAME picks submission
    NAME's run from a file of several) or a submission folder. Two
    folders are timed interleaved on the same inputs in one run, so drift hits both. Exit
    code 1 when B fails a case (or, with --fail-if-slower, is slower), 2 on a usage error,
    130 when interrupted.
    CPU-mode timings are not meaningful: there only the statuses are compared.

    \b
    Example:
        kbench compare runs/best.json runs/12.json --fail-if-slower 3
        kbench compare submissions/qknorm my_kernel --suite quick
    """
    check_paths((a, b))
    check_outputs(kw, ("--plot", plot_path))
    saved = saved_result(a) and saved_result(b)
    progress = Progress(kw["quiet"])
    if saved:
        ignored = given(RUN_OPTIONS)
        if ignored:
            notice(f"ignored with two saved results (nothing is run): {', '.join(ignored)}")
    elif normalize:
        notice("--normalize ignored: it takes two saved results")
    result = api.compare(a, b, task=kw["task_name"], normalize=normalize, notices=progress.notices,
                         **({} if saved else settings(kw, progress=progress)))
    progress.done()
    result["summary"]["fail_if_slower"] = fail_pct
    click.echo(compare_report(result, wide=kw["wide"]))
    link = f"\nCharts: [{plot_path.name}]({plot_path})\n" if plot_path else ""   # a CI summary names its artifact
    write(kw, result, compare_report(result, markdown=True) + link)
    charts.draw((a, b) if saved else (), plot_path, result)
    reasons = regressed(result, fail_pct)
    for reason in reasons:
        notice(f"regression: {reason}")
    sys.exit(1 if reasons else 0)


@cli.command(help=charts.HELP)
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "out", metavar="FILE", required=True, type=click.Path(path_type=Path), help=charts.OUTPUT_HELP)
@usage_errors()
def plot(results, out):
    check_paths(results)
    check_outputs({}, ("-o", out))
    charts.draw(results, out)


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
