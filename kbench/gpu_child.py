"""A per-GPU child of ``kbench eval --gpus``: runs the units its parent sends, one at a time, on
the one device it sees (CUDA_VISIBLE_DEVICES), and streams each case's record back as it ends.

Protocol, JSON lines. In, on stdin: ``{"task", "submission", "cases", "spec", "more"}`` per unit; EOF
ends the child. Out, on the stdout it was started with (its own prints go to stderr): first
``{"hello": calibration}``, then per unit ``{"case": record}`` per case and ``{"done": meta}``,
or ``{"fatal": message}`` when a unit cannot run at all (a usage error). A record streamed
is a record kept: the parent merges what came back if the child dies mid-unit.

Started as ``python -m kbench.gpu_child DEVICE WORKERS``: WORKERS worker processes (one unit's)
are started before torch is imported here (kbench/spare_workers.py), as the ``kbench`` command
does; the next unit's are started once the current unit's first case has ended (its own workers
are up by then, and do not share the host with 2 x WORKERS imports), when the parent says a unit
is left for this child (``"more"``), so no spare is left importing after the last unit
(docs/scale-out.md); they import at the lowest CPU priority, beside this unit's timed calls.
"""
from __future__ import annotations

import json
import os
import sys


def case_sender(send, more: bool, workers: int):
    """A unit's ``on_case``: each record sent back as it ends; after the first, when ``more`` (a unit
    is left for this child), the next unit's ``workers`` are started (this unit's are up by then)."""
    from . import spare_workers

    def on_case(record: dict) -> None:
        nonlocal more
        send({"case": record})
        if more:
            more = False
            spare_workers.warm_for_next(workers)

    return on_case


def main() -> None:
    from . import interrupts, spare_workers

    interrupts.install()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)   # anything else printed here (a library's warning) stays off the protocol

    def send(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    device, workers = sys.argv[1], int(sys.argv[2])
    spare_workers.prestart(workers)
    from .errors import KbenchError
    from .unit import calibration, run_unit

    send({"hello": calibration(device)})
    for line in sys.stdin:
        unit = json.loads(line)
        try:
            meta = run_unit(unit["task"], unit["submission"], unit["cases"], unit["spec"],
                            on_case=case_sender(send, bool(unit.get("more")), workers))
        except KbenchError as exc:
            send({"fatal": str(exc)})
            continue
        send({"done": {k: v for k, v in meta.items() if k != "cases"}})
    interrupts.exit(0)


if __name__ == "__main__":
    main()
