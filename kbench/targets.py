"""Submissions and baselines as the runner sees them: a worker that is restarted after
failures, and what the parent checks about the worker's replies and the environment."""
from __future__ import annotations

import os
import site
from pathlib import Path

import torch

from .tasks import Task
from .workers import Failure, WorkerProcess


def fingerprint(paths) -> dict:
    """Size and mtime of every file under ``paths`` (no __pycache__), and the names in each
    site-packages folder (a new .pth or sitecustomize runs in every later Python)."""
    out = {}
    for root in paths:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                full = os.path.join(folder, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                out[full] = (st.st_size, st.st_mtime_ns)
    for folder in {*site.getsitepackages(), site.getusersitepackages()}:
        try:
            out[folder] = tuple(sorted(os.listdir(folder)))
        except OSError:
            pass
    return out


def changed_files(before: dict, after: dict) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def well_formed(reply, timed: bool, calls: int = 1) -> bool:
    """A reply to ``calls`` calls: ("ok", [outputs] * calls, [sample] * calls or None, info),
    each output a tuple of tensors, each sample three finite non-negative numbers."""
    if len(reply) != 4 or not isinstance(reply[1], list) or len(reply[1]) != calls:
        return False
    if not all(isinstance(o, tuple) and all(isinstance(t, torch.Tensor) for t in o) for o in reply[1]):
        return False
    if not timed:
        return True
    samples = reply[2]
    return (isinstance(samples, list) and len(samples) == calls
            and all(isinstance(x, tuple) and len(x) == 3
                    and all(type(v) in (int, float) and 0 <= v < 1e9 for v in x) for x in samples))


class Target:
    """A submission or baseline: its worker (restarted after failures) and its samples."""

    def __init__(self, label: str, task: Task, path: Path, options, flush: int, strict: bool = True):
        self.label = label
        # A trusted baseline whose outputs miss the tolerance (a library kernel rounding
        # differently) is still timed, with the miss reported; a submission is not (strict).
        self.strict = strict
        self.task = task
        self.path = path
        self.options = options
        self.flush = flush
        self.worker: WorkerProcess | None = None
        self.load_failure: Failure | None = None
        self.flags: list[str] = []   # what the worker's tripwires saw, not yet put on a case
        self.worker_threads = 0      # Python threads the submission left running (last reply)

    def _absorb(self, reply) -> None:
        """Turn the tripwire report of a reply into flags. The worker is untrusted: keep only
        short strings, and never more than a few."""
        info = reply[-1] if isinstance(reply, tuple) and reply else None
        if not isinstance(info, dict):
            return
        threads = info.get("extra_threads")
        self.worker_threads = threads if isinstance(threads, int) else 0
        notes = []
        for event in list(info.get("events") or [])[:10]:
            notes.append(f"submission {str(event)[:200]}")
        tampered = [str(t)[:80] for t in list(info.get("tampered") or [])[:10]]
        if tampered:
            notes.append(f"submission replaced {', '.join(tampered)}: timer or harness tampering")
        threads = info.get("threads_at_return")
        if isinstance(threads, int) and threads > 0:
            notes.append("a thread the submission started during a call was still running when the "
                         "call returned: work finished after the timer stopped?")
        self.flags += [n for n in notes if n not in self.flags]

    def take_flags(self) -> list[str]:
        out, self.flags = self.flags, []
        return out

    def start(self) -> None:
        self.worker = WorkerProcess(self.task.contract_path, self.path, self.options.device,
                                    flush_bytes=self.flush,
                                    interpret=self.options.device == "cpu",
                                    timeout=self.options.timeout)
        self.worker.start()

    def ready(self, setup_cases: list[dict]) -> None:
        self.load_failure = self.worker.wait_ready()
        if self.load_failure is None:
            reply = self.worker.request(("setup", setup_cases), what="running setup()")
            if isinstance(reply, Failure):
                self.load_failure = Failure(reply.status, f"setup failed: {reply.reason}")
            else:
                self._absorb(reply)

    def ensure_running(self, setup_cases: list[dict]) -> Failure | None:
        """Restart the worker if a failure stopped it; the load failure if it cannot load."""
        if self.load_failure is None and not self.worker.alive:
            self.worker.cleanup()
            self.start()
            self.ready(setup_cases)
        return self.load_failure

    def request(self, message, what: str):
        reply = self.worker.request(message, what=what)
        if isinstance(reply, Failure):
            if self.worker.alive:
                self.worker.stop()  # a failed call may leave the process or CUDA context broken
        else:
            self._absorb(reply)
        return reply

    def close(self) -> None:
        if self.worker is not None:
            self.worker.cleanup()
