"""``kbench eval --gpus``: one child process per GPU of this host, each pinned to its GPU.

Light on purpose (no torch): ``kbench/cli/main.py`` starts the children here before the parent
imports torch, as it does a plain run's workers, so their start-up (Python, torch, CUDA, the
card's calibration: ~3 s) overlaps the parent's own instead of following it. The children are
kbench's own processes (kbench/scaleout/gpus.py); the submission never runs in them.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from kbench import interrupts
from kbench.errors import KbenchError

if TYPE_CHECKING:   # the launcher starts the children before torch: the run's modules come later
    from kbench.run.runner import Options
    from kbench.scaleout.plan import Unit
    from kbench.tasks.task import Task

_prestarted: dict[str, "Child"] = {}   # label -> a child started before the run asked for it


def gpu_count() -> int:
    """The GPUs this process may use, without importing torch: CUDA_VISIBLE_DEVICES's entries
    (up to the first invalid one, as CUDA reads it) or the driver's list; 0 if neither says."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        present = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        present = 0
    if visible is None:
        return present
    entries = [e.strip() for e in visible.split(",")]
    count = 0
    for entry in entries:
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(count, present) if present else count


def slots(gpus: list[int]) -> list[tuple[str, dict]]:
    """(label, environment) per GPU index as CUDA numbers them in this process."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else None
    return [(f"cuda:{g}", {"CUDA_VISIBLE_DEVICES": names[g] if names else str(g)}) for g in gpus]


def prestart(gpus_text: str, workers: int) -> None:
    """Start the children ``--gpus gpus_text`` will want (each with ``workers`` workers), now.
    Nothing when the text does not parse: the run reports that itself."""
    try:
        wanted = parse_gpus(gpus_text, gpu_count())
    except ValueError:
        return
    import atexit

    atexit.register(discard_prestarted)   # a run that ends before it takes them (a usage error)
    for label, env in slots(wanted):
        _prestarted[label] = Child(label, env, "cuda", workers)


def child_for(label: str, env: dict, device: str, workers: int) -> "Child":
    """A started child for this slot: the one started early if it matches, else a new one."""
    early = _prestarted.pop(label, None)
    if early is not None and (early.env, early.device, early.workers) == (env, device, workers):
        return early
    if early is not None:
        early.discard()
    return Child(label, env, device, workers)


def discard_prestarted() -> None:
    """Stop the children started early that the run did not use."""
    while _prestarted:
        _prestarted.popitem()[1].discard()


def parse_gpus(text: str, count: int) -> list[int]:
    """``all``, ``N`` (the first N) or ``0,2`` (these) -> GPU indices; ValueError naming the fix."""
    text = text.strip()
    if text == "all":
        wanted = list(range(count))
    elif "," not in text and text.isdigit():
        n = int(text)
        if not 1 <= n <= count:
            raise ValueError(f"--gpus {text}: this host has {count} GPU{'s' if count != 1 else ''} "
                             f"(for one GPU by index write '{text},')")
        wanted = list(range(n))
    else:
        try:
            wanted = [int(p) for p in text.split(",") if p.strip()]
        except ValueError:
            raise ValueError(f"--gpus {text}: give all, a count (2) or indices (0,1)") from None
        bad = [g for g in wanted if not 0 <= g < count]
        if bad or not wanted or len(set(wanted)) != len(wanted):
            raise ValueError(f"--gpus {text}: indices must be distinct, from 0 to {count - 1}")
    if not wanted:
        raise ValueError("--gpus: this host has no GPU")
    return wanted


class Child:
    """One child process and the unit it is running."""

    def __init__(self, label: str, env: dict, device: str, workers: int):
        self.label = label
        self.env, self.device, self.workers = env, device, workers
        self.tmp = tempfile.mkdtemp(prefix="kbench-slot-")
        self.log = open(os.path.join(self.tmp, "child.log"), "w+")
        full = {**os.environ, **env, "TMPDIR": self.tmp}
        with interrupts.critical():
            interrupts.track(self.tmp)
            self.popen = subprocess.Popen([sys.executable, "-m", "kbench.scaleout.gpus", device, str(workers)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                          env=full)
            interrupts.track(self.tmp, self)
        self.pid = self.popen.pid
        self.buffer = b""
        self.unit: Unit | None = None
        self.alive = True

    # what kbench.interrupts needs of a process it kills on an interrupt
    @property
    def _popen(self):
        return self.popen

    def join(self, timeout: float) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def send(self, message: dict) -> bool:
        try:
            self.popen.stdin.write((json.dumps(message) + "\n").encode())
            self.popen.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def lines(self, data: bytes) -> list[dict]:
        self.buffer += data
        *complete, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in complete if line.strip()]

    def why(self) -> str:
        """How the child ended, with the last line it wrote."""
        code = self.popen.wait()
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        self.log.seek(0)
        last = [line.strip() for line in self.log.read().splitlines() if line.strip()]
        return how + (f": {last[-1][:200]}" if last else "")

    def close(self) -> None:
        if self.popen.stdin and not self.popen.stdin.closed:
            try:
                self.popen.stdin.close()
            except OSError:
                pass

    def stop(self, sig=signal.SIGTERM, wait: float = 10.0) -> None:
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass
        self.join(wait)

    def discard(self) -> None:
        self.close()
        self.stop(signal.SIGTERM, wait=5.0)
        self.stop(signal.SIGKILL)
        self.remove()

    def remove(self) -> None:
        import shutil

        self.log.close()
        with interrupts.critical():
            shutil.rmtree(self.tmp, ignore_errors=True)
            interrupts.untrack(self.tmp)


# -- gpu pool ------------------------------------------------------------------------------
# ``kbench eval --gpus``: one child process per GPU of this host, each pinned to its GPU
# (CUDA_VISIBLE_DEVICES), taking units (kbench/scaleout/plan.py) from one queue as it frees up.
#
# A child (kbench/scaleout/gpus.py) makes its cases' inputs and ground truth, decides their verdicts
# and streams each record back; this process only schedules and merges. A child that dies
# (its GPU fell off the bus, it was killed) leaves its unit's unfinished cases to another child,
# once. An interrupt stops the children and says which cases have no result.

def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_on_slots(task: Task, submissions: list[Path], opts: Options, slots: list[tuple[str, dict]],
                 on_event=None) -> list[dict]:
    """Run every submission on every case over ``slots`` (label, environment), one child each;
    the run records, as a one-GPU run makes them. ``on_event(kind, child, payload)`` is told of
    every message ("hello", "case", "done") and death ("lost") as it happens."""
    from kbench.scaleout.plan import Tally, options_spec, plan

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
        next unit's workers early, kbench/scaleout/gpus.py)."""
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
    return run_on_slots(task, submissions, opts, slots(gpus), on_event)


# -- gpu child -----------------------------------------------------------------------------
# A per-GPU child of ``kbench eval --gpus``: runs the units its parent sends, one at a time, on
# the one device it sees (CUDA_VISIBLE_DEVICES), and streams each case's record back as it ends.
#
# Protocol, JSON lines. In, on stdin: ``{"task", "submission", "cases", "spec", "more"}`` per unit; EOF
# ends the child. Out, on the stdout it was started with (its own prints go to stderr): first
# ``{"hello": calibration}``, then per unit ``{"case": record}`` per case and ``{"done": meta}``,
# or ``{"fatal": message}`` when a unit cannot run at all (a usage error). A record streamed
# is a record kept: the parent merges what came back if the child dies mid-unit.
#
# Started as ``python -m kbench.scaleout.gpus DEVICE WORKERS``: the workers' fork server starts
# before torch is imported here (kbench/run/workers.py), as in the ``kbench`` command; the next
# unit's WORKERS workers are started once the current unit's first case has ended, when the parent
# says a unit is left for this child (``"more"``), so no spare is left waiting after the last unit
# (docs/scale-out.md).

def case_sender(send, more: bool, workers: int):
    """A unit's ``on_case``: each record sent back as it ends; after the first, when ``more`` (a unit
    is left for this child), the next unit's ``workers`` are started (this unit's are up by then)."""
    from kbench.run import workers as workers_mod

    def on_case(record: dict) -> None:
        nonlocal more
        send({"case": record})
        if more:
            more = False
            workers_mod.keep_warm(workers)

    return on_case


def main() -> None:
    from kbench import interrupts
    from kbench.run import workers as workers_mod

    interrupts.install()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)   # anything else printed here (a library's warning) stays off the protocol

    def send(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    device, workers = sys.argv[1], int(sys.argv[2])
    workers_mod.start_server()   # its torch import overlaps this process's
    from kbench.errors import KbenchError
    from kbench.scaleout.plan import calibration, run_unit

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
