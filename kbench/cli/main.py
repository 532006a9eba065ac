"""The `kbench` command's entry point: starts the workers a run will need, then imports the rest.

Importing torch takes seconds on a slow host, in the parent and in every worker; started
first, the workers import it while the parent does (kbench/run/workers.py).
"""
from __future__ import annotations

import errno
import os
import sys

from kbench.stats.estimates import DEFAULT_PROCESSES


def _value(args: list[str], name: str) -> str | None:
    """The value of option ``name`` as typed (``--name V`` or ``--name=V``), or None."""
    for a, b in zip(args, args[1:] + [""]):
        if a == name:
            return b
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _workers_per_run(args: list[str]) -> int:
    """How many workers one run of the command needs: a submission and its baseline (eval), or
    A and B (compare of two folders), times the processes per target where a GPU will be used;
    none for help or saved results."""
    if not args or args[0] not in ("eval", "compare") or "--help" in args or "-h" in args:
        return 0
    if args[0] == "compare" and any(a.endswith(".json") or ".json:" in a for a in args[1:]):
        return 0
    if not _well_formed(args):   # a usage error: answered before any worker (or torch) starts
        return 0
    targets = 1 if args[0] == "eval" and _value(args, "--baseline") == "none" else 2
    try:
        processes = int(_value(args, "--processes") or DEFAULT_PROCESSES) if _on_gpu(args) else 1
        pool = int(_value(args, "--pool") or _task_pool(args)) if _on_gpu(args) else 0
    except ValueError:
        processes, pool = 1, 0   # click reports the bad value
    return targets * min(max(processes, pool, 1), 8)


def _well_formed(args: list[str]) -> bool:
    """Whether ``eval``/``compare`` will get as far as a run: click parses the command line, the
    paths exist, the --task is known and a --device cuda has a device node. Otherwise the
    command fails with one line, which must not wait for workers to start."""
    from pathlib import Path

    import click

    from kbench.cli.commands import cli
    from kbench.tasks.task import all_tasks

    try:
        ctx = cli.commands[args[0]].make_context(args[0], list(args[1:]))
    except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
        return False
    paths = ctx.params.get("submissions") or [ctx.params.get(k) for k in ("a", "b") if ctx.params.get(k)]
    try:
        if not all(Path(p).exists() for p in paths):
            return False
    except OSError:   # a name too long to exist: the command says so, in one line
        return False
    task = ctx.params.get("task_name")
    if task is not None and task not in all_tasks():
        return False
    return not (ctx.params.get("device") == "cuda" and not os.path.exists("/dev/nvidiactl"))


def _task_pool(args: list[str]) -> int:
    """The GPU_POOL of the command's task (--task, else a submission folder named after the
    task, as kbench tells it), read without importing torch; 0 if none says."""
    from pathlib import Path

    from kbench.tasks.task import declared_gpu_pool

    named = _value(args, "--task")
    paths = [Path(a) for a in args[1:] if not a.startswith("-")]
    candidates = [named] if named else [name for p in paths for name in (p.name, p.parent.name)]
    return next((pool for pool in map(declared_gpu_pool, candidates) if pool), 0)


def _on_gpu(args: list[str]) -> bool:
    device = _value(args, "--device") or "auto"
    return device == "cuda" or (device == "auto" and os.path.exists("/dev/nvidiactl"))


def _workers_needed(args: list[str]) -> int:
    """How many workers this process's run takes: none when the work is sent elsewhere (--gpus:
    per-GPU children, started first instead; --ray: Ray tasks)."""
    if any(a.split("=", 1)[0] in ("--gpus", "--ray") for a in args):
        return 0
    return _workers_per_run(args)


def _gpu_children(args: list[str]) -> tuple[str, int] | None:
    """(--gpus's value, workers per child) when ``eval --gpus`` will run on CUDA GPUs."""
    gpus = _value(args, "--gpus")
    if not args or args[0] != "eval" or gpus is None or _value(args, "--ray") is not None or not _on_gpu(args):
        return None
    workers = _workers_per_run(args)
    return (gpus, workers) if workers else None


def _profile_parent() -> None:
    """KBENCH_PROFILE_DIR: the command's own cost, as cProfile's DIR/parent-<pid>.prof (the
    workers write theirs there too). Written by an atexit hook: the command ends with
    os._exit, which a `python -m cProfile` around it would never see."""
    folder = os.environ.get("KBENCH_PROFILE_DIR")
    if not folder:
        return
    import atexit
    import cProfile

    profiler = cProfile.Profile()
    atexit.register(lambda: (profiler.disable(), profiler.dump_stats(os.path.join(folder, f"parent-{os.getpid()}.prof"))))
    profiler.enable()


def main() -> None:
    from kbench import interrupts
    from kbench.errors import KbenchError

    interrupts.install()  # first: a Ctrl-C from here on is one line and leaves nothing behind
    from kbench.worker import environment

    environment.take_from_process()   # before any worker or GPU child inherits the environment
    if _workers_needed(sys.argv[1:]):   # the workers' server imports torch while this process does
        from kbench.run import workers as workers_mod

        try:
            workers_mod.start_server()
        except KbenchError:   # no room for its socket: the run says why, in one line, when it starts a worker
            pass
    children = _gpu_children(sys.argv[1:])
    if children:   # eval --gpus: each GPU's child starts now, while this process imports torch
        from kbench.scaleout import gpus as gpus_mod

        gpus_mod.prestart(*children)
    _profile_parent()
    try:
        from kbench.cli.commands import main as cli_main

        cli_main()
    except SystemExit as exc:
        interrupts.exit(exc.code)
    except OSError as exc:   # the output on a full disk or a broken device: one line, not a traceback
        if exc.errno not in (errno.ENOSPC, errno.EIO):
            raise
        os.write(2, f"kbench: the output could not be written: {exc.strerror}\n".encode())
        interrupts.exit(1)
    interrupts.exit(0)
