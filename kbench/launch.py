"""The `kbench` command: starts the workers a run will need, then imports the rest.

Importing torch takes seconds on a slow host, in the parent and in every worker; started
first, the workers import it while the parent does (kbench/spare_workers.py).
"""
from __future__ import annotations

import os
import sys

DEFAULT_PROCESSES = 2   # --processes: worker processes per target on a GPU (docs/measurement.md)


def _value(args: list[str], name: str) -> str | None:
    """The value of option ``name`` as typed (``--name V`` or ``--name=V``), or None."""
    for a, b in zip(args, args[1:] + [""]):
        if a == name:
            return b
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _workers_needed(args: list[str]) -> int:
    """How many workers the command will start first: a submission and its baseline (eval),
    or A and B (compare of two folders), times the processes per target where a GPU will be
    used; none for help, saved results or work sent elsewhere (--gpus, --ray)."""
    if not args or args[0] not in ("eval", "compare") or "--help" in args or "-h" in args:
        return 0
    if args[0] == "compare" and any(a.endswith(".json") for a in args[1:]):
        return 0
    if any(a.split("=", 1)[0] in ("--gpus", "--ray") for a in args):
        return 0   # the work runs in per-GPU children or Ray tasks, each starting its own
    targets = 1 if args[0] == "eval" and _value(args, "--baseline") == "none" else 2
    device = _value(args, "--device") or "auto"
    gpu = device == "cuda" or (device == "auto" and os.path.exists("/dev/nvidiactl"))
    try:
        processes = int(_value(args, "--processes") or DEFAULT_PROCESSES) if gpu else 1
    except ValueError:
        processes = 1   # click reports the bad value
    return targets * min(max(processes, 1), 8)


def main() -> None:
    from . import interrupts

    interrupts.install()  # first: a Ctrl-C from here on is one line and leaves nothing behind
    count = _workers_needed(sys.argv[1:])
    if count:
        from . import spare_workers

        spare_workers.prestart(count)
    try:
        from .cli import main as cli_main

        cli_main()
    except SystemExit as exc:
        interrupts.exit(exc.code)
    interrupts.exit(0)
