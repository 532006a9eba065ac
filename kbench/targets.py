"""Submissions and baselines as the runner sees them: a worker that is restarted after
failures and keeps its tripwire flags, and the fingerprint of kbench's files and the environment."""
from __future__ import annotations

import os
import site
from pathlib import Path

from . import protocol
from .detectors import tripwire_flags
from .protocol import Failure
from .tasks import Task
from .worker_process import WorkerProcess


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
        self.readied = False         # ready() has been waited for

    def _absorb(self, reply) -> None:
        if isinstance(reply, protocol.Done):
            self.flags += [f for f in tripwire_flags(reply.report) if f not in self.flags]

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
        self.readied = True
        self.load_failure = self.worker.wait_ready()
        if self.load_failure is None:
            reply = self.request(protocol.Setup(setup_cases), what="running setup()")
            if isinstance(reply, Failure):
                self.load_failure = Failure(reply.status, f"setup failed: {reply.reason}")
                self.worker.stop()

    def ensure_running(self, setup_cases: list[dict]) -> Failure | None:
        """Wait for the worker started by start(), or restart it if a failure stopped it;
        the load failure if it cannot load."""
        if not self.readied:
            self.ready(setup_cases)
        elif self.load_failure is None and not self.worker.alive:
            self.worker.cleanup()
            self.start()
            self.ready(setup_cases)
        return self.load_failure

    def request(self, message, what: str):
        """A ``protocol.Done`` or a Failure; the worker survives Python exceptions."""
        reply = self.worker.request(message, what=what)
        self._absorb(reply)
        return reply

    def close(self) -> None:
        if self.worker is not None:
            self.worker.cleanup()
