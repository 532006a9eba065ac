"""Worker processes started before the parent imports torch.

Every worker imports torch (2-3 s on a slow host) before it can load a submission, and
so does the parent. ``kbench eval`` and ``kbench compare`` start their workers first
(kbench/launch.py), so the two imports overlap instead of following each other; a worker
then waits for its assignment (``protocol.Assign``: which contract, which submission,
which device). Nothing here imports torch. A worker started on demand goes the same way:
spawned bare, then assigned.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from multiprocessing import resource_tracker

from . import interrupts

_SPAWN = multiprocessing.get_context("spawn")


def _user() -> str:
    try:
        import getpass
        return getpass.getuser()
    except Exception:  # noqa: BLE001
        return str(os.getuid())


@dataclass
class BareWorker:
    """A spawned worker process not yet told what to load; ``tmp`` is its private folder
    (its log, and its TMPDIR: the submission's temp files)."""

    process: object
    conn: object
    tmp: str

    @property
    def log_path(self) -> str:
        return os.path.join(self.tmp, "worker.log")

    def discard(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, TypeError, OSError):
            pass
        self.process.join(5)
        self.conn.close()
        with interrupts.critical():
            shutil.rmtree(self.tmp, ignore_errors=True)
            interrupts.untrack(self.tmp)


def spawn(quiet: bool = False) -> BareWorker:
    """Start one worker process; it imports torch and waits for its assignment. ``quiet``: it
    imports at the lowest CPU priority (kbench/worker_entry.py), for a spare not needed yet."""
    with interrupts.critical():  # an interrupt now would find the folder or the process unregistered
        return _spawn(quiet)


def _spawn(quiet: bool) -> BareWorker:
    from . import worker_entry

    tmp = tempfile.mkdtemp(prefix="kbench-worker-")
    interrupts.track(tmp)
    parent_conn, child_conn = _SPAWN.Pipe(duplex=True)
    # The worker inherits the environment at spawn (TRITON_INTERPRET it sets itself on
    # assignment, before anything imports Triton).
    env = {"TMPDIR": tmp, "TRITON_INTERPRET": None,
           # torch's compile cache would otherwise follow TMPDIR and be lost after every run
           "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
               tempfile.gettempdir(), f"torchinductor_{_user()}")}
    saved = {k: os.environ.get(k) for k in env}
    try:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        process = _SPAWN.Process(target=worker_entry.main, args=(child_conn, os.path.join(tmp, "worker.log"), quiet),
                                 daemon=True)
        # Started first: starting it unblocks SIGINT in this thread.
        resource_tracker.ensure_running()
        with interrupts.sigint_blocked():  # inherited: the worker never sees the terminal's Ctrl-C
            process.start()
        interrupts.track(tmp, process)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    child_conn.close()
    return BareWorker(process, parent_conn, tmp)


_spares: list[BareWorker] = []


def prestart(count: int, quiet: bool = False) -> None:
    """Start ``count`` workers now; ``take`` hands them out, the rest go at exit."""
    for _ in range(count):
        _spares.append(spawn(quiet))


def keep_warm(count: int, quiet: bool = False) -> None:
    """Have ``count`` started workers waiting (a run of many evaluations, a restart after a
    crash: the next worker has imported torch already)."""
    alive = [s for s in _spares if s.process.is_alive()]
    prestart(max(0, count - len(alive)), quiet)


def warm_for_next(count: int) -> None:
    """The next run's (or a GPU child's next unit's) ``count`` workers, started once the current
    one's first case has ended: its own workers are up by then, and these import at the lowest
    CPU priority, taking only the CPU its timed processes leave. A spare imports torch and waits;
    it makes no CUDA context before its assignment."""
    keep_warm(count, quiet=True)


def take() -> BareWorker:
    """A started worker: a spare if one is alive, else a new one."""
    while _spares:
        spare = _spares.pop(0)
        if spare.process.is_alive():
            return spare
        spare.discard()
    return spawn()


@atexit.register
def _discard_spares() -> None:
    while _spares:
        _spares.pop().discard()
