"""``kbench eval --gpus``: one child process per GPU of this host, each pinned to its GPU
(CUDA_VISIBLE_DEVICES), taking units (kbench/fanout.py) from one queue as it frees up.

A child (kbench/gpu_child.py) makes its cases' inputs and ground truth, decides their verdicts
and streams each record back; this process only schedules and merges. A child that dies
(its GPU fell off the bus, it was killed) leaves its unit's unfinished cases to another child,
once. An interrupt stops the children and says which cases have no result.
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

from . import interrupts
from .errors import KbenchError
from .fanout import Tally, Unit, plan
from .runner import Options
from .tasks import Task
from .unit import options_spec


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


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


class _Child:
    """One child process and the unit it is running."""

    def __init__(self, label: str, env: dict, device: str, workers: int):
        self.label = label
        self.tmp = tempfile.mkdtemp(prefix="kbench-slot-")
        self.log = open(os.path.join(self.tmp, "child.log"), "w+")
        full = {**os.environ, **env, "TMPDIR": self.tmp}
        with interrupts.critical():
            interrupts.track(self.tmp)
            self.popen = subprocess.Popen([sys.executable, "-m", "kbench.gpu_child", device, str(workers)],
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

    def remove(self) -> None:
        import shutil

        self.log.close()
        with interrupts.critical():
            shutil.rmtree(self.tmp, ignore_errors=True)
            interrupts.untrack(self.tmp)


def run_on_slots(task: Task, submissions: list[Path], opts: Options, slots: list[tuple[str, dict]],
                 on_event=None) -> list[dict]:
    """Run every submission on every case over ``slots`` (label, environment), one child each;
    the run records, as a one-GPU run makes them. ``on_event(kind, child, payload)`` is told of
    every message ("hello", "case", "done") and death ("lost") as it happens."""
    tally = Tally(task, opts, submissions)
    queue = deque(plan(len(submissions), tally.case_names, len(slots)))
    spec = options_spec(opts)
    workers = opts.process_count * (1 if opts.baseline == "none" else 2)
    began = time.perf_counter()
    children = [_Child(label, env, opts.device, workers) for label, env in slots]
    selector = selectors.DefaultSelector()
    for child in children:
        selector.register(child.popen.stdout, selectors.EVENT_READ, child)
    total = len(submissions) * len(tally.cases)

    def last_words() -> str:
        for child in children:
            child.stop(signal.SIGTERM, wait=5.0)
        return tally.missing()

    def give(child: _Child) -> None:
        while queue:
            unit = queue.popleft()
            child.unit = unit
            if child.send({"task": task.name, "submission": str(submissions[unit.submission]),
                           "cases": unit.cases, "spec": spec}):
                return
            queue.appendleft(unit)   # it died: its EOF is read next
            child.unit = None
            return

    def lost(child: _Child) -> None:
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
        for child in children:
            give(child)
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
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else None
    slots = [(f"cuda:{g}", {"CUDA_VISIBLE_DEVICES": names[g] if names else str(g)}) for g in gpus]
    return run_on_slots(task, submissions, opts, slots, on_event)
