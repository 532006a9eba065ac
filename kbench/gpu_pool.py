"""``kbench eval --gpus``: one child process per GPU of this host, each pinned to its GPU
(CUDA_VISIBLE_DEVICES), taking units (kbench/fanout.py) from one queue as it frees up.

A child (kbench/gpu_child.py) makes its cases' inputs and ground truth, decides their verdicts
and streams each record back; this process only schedules and merges. A child that dies
(its GPU fell off the bus, it was killed) leaves its unit's unfinished cases to another child,
once. An interrupt stops the children and says which cases have no result.
"""
from __future__ import annotations

import os
import selectors
import signal
import time
from collections import deque
from pathlib import Path

from . import interrupts
from .errors import KbenchError
from .fanout import Tally, plan
from .gpu_slots import Child, child_for, discard_prestarted, slots as gpu_slots
from .runner import Options
from .tasks import Task
from .unit import options_spec


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_on_slots(task: Task, submissions: list[Path], opts: Options, slots: list[tuple[str, dict]],
                 on_event=None) -> list[dict]:
    """Run every submission on every case over ``slots`` (label, environment), one child each;
    the run records, as a one-GPU run makes them. ``on_event(kind, child, payload)`` is told of
    every message ("hello", "case", "done") and death ("lost") as it happens."""
    tally = Tally(task, opts, submissions)
    queue = deque(plan(len(submissions), tally.case_names, len(slots)))
    spec = options_spec(opts)
    workers = tally.opts.pool_size * (1 if opts.baseline == "none" else 2)
    began = time.perf_counter()
    children = [child_for(label, env, opts.device, workers) for label, env in slots]
    discard_prestarted()   # started early for slots this run does not use
    selector = selectors.DefaultSelector()
    for child in children:
        selector.register(child.popen.stdout, selectors.EVENT_READ, child)
    total = len(submissions) * len(tally.cases)

    def last_words() -> str:
        for child in children:
            child.stop(signal.SIGTERM, wait=5.0)
        return tally.missing()

    def give(child: Child, ahead: int = 0) -> None:
        """The next unit to ``child``; ``ahead``: children after it still to get their first unit
        (the unit's "more": whether a unit is left for this child afterwards, so it starts the
        next unit's workers early, kbench/gpu_child.py)."""
        while queue:
            unit = queue.popleft()
            child.unit = unit
            if child.send({"task": task.name, "submission": str(submissions[unit.submission]),
                           "cases": unit.cases, "spec": spec, "more": len(queue) > ahead}):
                return
            queue.appendleft(unit)   # it died: its EOF is read next
            child.unit = None
            return

    def lost(child: Child) -> None:
        child.alive = False
        selector.unregister(child.popen.stdout)
        why = child.why()
        if on_event:
            on_event("lost", child, why)
        if child.unit is not None:
            others = any(c.alive for c in children)
            again = tally.lose(child.unit, child.label, why, elsewhere=others)
            if again is not None:
                queue.appendleft(again)
            child.unit = None

    interrupts.on_interrupt(last_words)
    fatal = None
    try:
        for i, child in enumerate(children):
            give(child, ahead=len(children) - 1 - i)
        while any(c.unit is not None for c in children) or (queue and any(c.alive for c in children)):
            for child in children:
                if child.alive and child.unit is None and queue:
                    give(child)
            if not selector.get_map():
                break
            for key, _ in selector.select():
                child = key.data
                data = os.read(child.popen.stdout.fileno(), 1 << 16)
                if not data:
                    lost(child)
                    continue
                for message in child.lines(data):
                    kind, payload = next(iter(message.items()))
                    if kind == "hello":
                        tally.cards[child.label] = payload
                    elif kind == "case":
                        tally.add_case(child.unit, child.label, payload)
                        if opts.progress:
                            opts.progress(f"[{len(tally.records)}/{total}] {payload['case']} on {child.label}")
                    elif kind == "done":
                        tally.add_done(child.unit, child.label, payload)
                        child.unit = None
                    elif kind == "fatal":
                        fatal = payload
                        child.unit = None
                        queue.clear()
                    if on_event:
                        on_event(kind, child, payload)
        tally.abandon(queue, "every device was lost")
    finally:
        interrupts.forget(last_words)
        for child in children:
            child.close()
        for child in children:
            child.stop(signal.SIGTERM, wait=30.0)
            child.stop(signal.SIGKILL)
            child.remove()
        selector.close()
    if fatal:
        raise KbenchError(fatal)
    return tally.merge(time.perf_counter() - began)


def run_on_gpus(task: Task, submissions: list[Path], opts: Options, gpus: list[int], on_event=None) -> list[dict]:
    """``kbench eval --gpus``: one child per GPU in ``gpus`` (indices as CUDA numbers them here)."""
    return run_on_slots(task, submissions, opts, gpu_slots(gpus), on_event)
