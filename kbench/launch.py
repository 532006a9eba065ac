"""The `kbench` command: starts the workers a run will need, then imports the rest.

Importing torch takes seconds on a slow host, in the parent and in every worker; started
first, the workers import it while the parent does (kbench/spare_workers.py).
"""
from __future__ import annotations

import sys


def _workers_needed(args: list[str]) -> int:
    """How many workers the command will start first: a submission and its baseline (eval),
    or A and B (compare of two folders); none for help or saved results."""
    if not args or args[0] not in ("eval", "compare") or "--help" in args or "-h" in args:
        return 0
    if args[0] == "compare" and any(a.endswith(".json") for a in args[1:]):
        return 0
    no_baseline = "--baseline=none" in args or any(
        a == "--baseline" and b == "none" for a, b in zip(args, args[1:]))
    return 1 if args[0] == "eval" and no_baseline else 2


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
