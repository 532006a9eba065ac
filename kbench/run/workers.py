"""Worker processes, forked from a server that imported torch once, and the CUDA context made
after theirs.

Every worker needs torch (2-3 s of CPU to import on a slow host) before it can load a submission.
Workers are forked from one server process (multiprocessing's forkserver) that imported torch and
nothing else: no kbench code, no submission, no CUDA context (importing torch makes none), so a
worker starts as fresh as a spawned interpreter, in milliseconds once the server is up.
``kbench eval`` and ``kbench compare`` start the server first (kbench/cli/main.py), so its import
overlaps the parent's own. A worker takes the parent's environment as it is when the worker
starts, then waits for its assignment (``protocol.Assign``: which contract, which submission,
which device). Nothing here imports torch.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing import forkserver, resource_tracker

from kbench import interrupts
from kbench.errors import KbenchError
from kbench.worker import environment

_FORK = multiprocessing.get_context("forkserver")


def _server_pid() -> int | None:
    """The running fork server's pid (None before the first start)."""
    return forkserver._forkserver._forkserver_pid


def _user() -> str:
    try:
        import getpass
        return getpass.getuser()
    except Exception:  # noqa: BLE001
        return str(os.getuid())


class ForkedProcess:
    """A forked worker's handle: whether it runs is read from a pidfd, not from the fork server
    (``server``, its pid), which only relays its exit code, so a worker outlives a server its
    submission stopped. The multiprocessing.Process calls kbench makes: ``pid``, ``is_alive``,
    ``join``, ``exitcode``."""

    def __init__(self, process, server: int | None):
        self.process, self.pid, self.server, self._gone = process, process.pid, server, False
        try:
            self._fd = os.pidfd_open(process.pid)   # Linux 5.3+
        except (AttributeError, OSError):   # none: the server's word
            self._fd = None

    def _exited(self, timeout: float | None) -> bool:
        if self._gone:
            return True
        if self._fd is None:
            self.process.join(timeout)
            self._gone = not self.process.is_alive()
        elif select.select([self._fd], [], [], timeout)[0]:
            os.close(self._fd)
            self._fd, self._gone = None, True
        return self._gone

    def is_alive(self) -> bool:
        return not self._exited(0)

    def join(self, timeout: float | None = None) -> None:
        if self._exited(timeout):
            self.process.join(1)   # its exit code, from the server (255 if the server is gone)

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode if self._exited(0) else None

    def __del__(self):
        if self._fd is not None:
            os.close(self._fd)


@dataclass
class BareWorker:
    """A started worker process not yet told what to load; ``tmp`` is its private folder
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


def spawn() -> BareWorker:
    """Start one worker process; it waits for its assignment."""
    with interrupts.critical():  # an interrupt now would find the folder or the process unregistered
        return _spawn()


# CPU tensors cross between processes as file descriptors sent over a Unix socket, which
# multiprocessing makes in the sending process's temp folder: a worker's is
# <root>/kbench-worker-<8>/pymp-<8>/listener-<8> (each <8> a random name), and such a path ends
# at 107 bytes. Under a TMPDIR too long for that, the workers' folders (and this process's own
# multiprocessing folder) go under a short system folder instead.
_SOCKET_PATH_EXTRA = sum(len(part) + 8 for part in ("/kbench-worker-", "/pymp-", "/listener-"))
_SHORT_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")
_roots: dict[str, str | None] = {}   # TMPDIR -> the folder the workers' folders go in (None: TMPDIR)


def _workers_root() -> str | None:
    temp = tempfile.gettempdir()
    if temp not in _roots:
        fits = [d for d in (temp, *_SHORT_ROOTS) if len(d.encode()) + _SOCKET_PATH_EXTRA <= 107
                and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)]
        if not fits:
            raise KbenchError(f"TMPDIR's path is too long for the Unix sockets that pass tensors between "
                          f"processes ({len(temp.encode())} bytes, at most {107 - _SOCKET_PATH_EXTRA}), and "
                          f"none of {', '.join(_SHORT_ROOTS)} can stand in: set TMPDIR to a shorter folder")
        root = None if fits[0] == temp else fits[0]
        if root is not None:   # this process's own listener folder, made (and kept) now, there
            from multiprocessing import util

            saved, tempfile.tempdir = tempfile.tempdir, root
            try:
                util.get_temp_dir()
            finally:
                tempfile.tempdir = saved
        _roots[temp] = root
    return _roots[temp]


def start_server() -> None:
    """Start the fork server if it is not running; it imports torch while the caller goes on (the
    first worker's start waits for that). Its environment is this process's less the variables no
    worker runs with (kbench/worker/environment.py), since torch reads some as it is imported; SIGINT
    is blocked in it and in every worker it forks (kbench/interrupts.py). KbenchError where TMPDIR
    leaves no room for its socket's path."""
    _workers_root()   # this process's multiprocessing folder, where the server's socket goes
    forkserver.set_forkserver_preload(["torch"])
    saved = {name: os.environ.pop(name) for name in environment.NOT_PASSED_ON if name in os.environ}
    try:
        resource_tracker.ensure_running()   # first: starting it unblocks SIGINT in this thread
        with interrupts.sigint_blocked():
            forkserver.ensure_running()
    finally:
        os.environ.update(saved)


def _spawn() -> BareWorker:
    tmp = tempfile.mkdtemp(prefix="kbench-worker-", dir=_workers_root())
    interrupts.track(tmp)
    parent_conn, child_conn = _FORK.Pipe(duplex=True)
    # The worker's environment: this process's now (TRITON_INTERPRET it sets itself on assignment,
    # before anything imports Triton).
    env = {**os.environ, "TMPDIR": tmp,
           # torch's compile cache would otherwise follow TMPDIR and be lost after every run
           "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
               tempfile.gettempdir(), f"torchinductor_{_user()}")}
    env.pop("TRITON_INTERPRET", None)
    process = _FORK.Process(target=worker_entry, args=(child_conn, os.path.join(tmp, "worker.log"), env),
                            daemon=True)
    try:
        _start(process)
    except BaseException:
        parent_conn.close()
        shutil.rmtree(tmp, ignore_errors=True)
        interrupts.untrack(tmp)
        raise
    finally:
        child_conn.close()
    handle = ForkedProcess(process, _server_pid())
    interrupts.track(tmp, handle)
    return BareWorker(handle, parent_conn, tmp)


def _start(process) -> None:
    """Start ``process`` from the fork server, on a new server where the running one has died: a
    worker's parent is the server, which its submission can kill (docs/threat-model.md)."""
    for attempt in range(2):
        start_server()
        try:
            with interrupts.sigint_blocked():  # inherited: the worker never sees the terminal's Ctrl-C
                process.start()
            return
        except (EOFError, OSError) as exc:   # the server died before or while it forked
            if attempt:
                raise KbenchError(f"no worker could be started: the workers' fork server failed twice "
                                  f"({type(exc).__name__}: {exc})") from None
            forkserver._forkserver._stop()   # reaped; the next start_server() starts a new one


_spares: list[BareWorker] = []


def prestart(count: int) -> None:
    """Start ``count`` workers now; ``take`` hands them out, the rest go at exit."""
    for _ in range(count):
        _spares.append(spawn())


def keep_warm(count: int) -> None:
    """Have ``count`` started workers waiting (the next run of many evaluations, a GPU child's
    next unit, a restart after a crash). A spare makes no CUDA context before its assignment."""
    alive = [s for s in _spares if s.process.is_alive()]
    prestart(max(0, count - len(alive)))


def take() -> BareWorker:
    """A started worker: a spare if one is alive and the server it came from still runs (only that
    server can relay its exit code: a submission can stop it), else a new one."""
    start_server()
    while _spares:
        spare = _spares.pop(0)
        if spare.process.is_alive() and spare.process.server == _server_pid():
            return spare
        spare.discard()
    return spawn()


@atexit.register
def _discard_spares() -> None:
    while _spares:
        _spares.pop().discard()


# -- the worker's entry point ------------------------------------------------------------
def worker_entry(conn, log_path: str, env: dict) -> None:
    """The worker's entry point, importable without torch: the parent's environment, less the
    shell's variables that change a timing, before Triton or CUDA start; then the worker's loop."""
    # Started with SIGINT blocked (kbench/interrupts.py): ignored for good, the parent stops workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.environ.clear()   # the server's, as it was when it started
    os.environ.update(env)
    tempfile.tempdir = None   # gettempdir() reads TMPDIR again
    environment.strip()   # kbench/worker/environment.py
    from kbench.worker import loop

    loop.main(conn, log_path)


# -- other context -------------------------------------------------------------------------
# No timed worker's CUDA context is the last one made on its GPU.
#
# Measured on one H200 (docs/measurement.md, "Another CUDA context after the workers' own"): a
# process whose CUDA context was the last made on the GPU read qknorm's flashinfer baseline 2.6-4.3%
# slower, and its bundled kernel 1.1-5.1% slower, until another process made a context there. Even
# one that exited at once did it, and the process read the faster figure for the rest of its life;
# waiting did not.
# The context this module makes does it as a torch process's did.
# The driver's mechanism is unknown. Which of a run's contexts came last (a worker's, the parent's)
# was an accident of start-up order, so before a case's timed calls, when one of its workers
# started since the last time, the runner has a short-lived process make a context on the same
# GPU and exit. That process goes through the driver API alone (no torch import): it retains the
# device's primary context, as torch does, allocates and clears 1 MiB, synchronizes, and prints
# the card's UUID, so a run can show which GPU it touched.

_MAKE_CONTEXT = r"""
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
def ok(what, rc):
    if rc:
        sys.exit(f"{what} returned CUresult {rc}")
dev, ctx, ptr, size = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_size_t(1 << 20)
ok("cuInit", cu.cuInit(0))
ok("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), int(sys.argv[1])))
ok("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
ok("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
ok("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), size))
ok("cuMemsetD8", cu.cuMemsetD8_v2(ptr, ctypes.c_ubyte(0), size))
ok("cuCtxSynchronize", cu.cuCtxSynchronize())
uuid = ctypes.create_string_buffer(16)
ok("cuDeviceGetUuid", cu.cuDeviceGetUuid_v2(uuid, dev))
print(uuid.raw.hex())
"""


class OtherContextError(RuntimeError):
    pass


def make_and_exit(ordinal: int = 0, timeout: float = 60.0) -> dict:
    """Another process makes a CUDA context on device ``ordinal`` (as this process numbers its
    devices: it inherits CUDA_VISIBLE_DEVICES) and exits. Returns {"uuid": the card's UUID,
    "seconds": how long it took}; raises OtherContextError if it could not."""
    began = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", _MAKE_CONTEXT, str(ordinal)],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OtherContextError(str(exc).splitlines()[0]) from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout or f"exit status {proc.returncode}").strip().splitlines()
        raise OtherContextError(lines[-1])
    raw = proc.stdout.strip()
    uuid = f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"
    return {"uuid": uuid, "seconds": round(time.perf_counter() - began, 3)}


def unfollowed(members) -> list:
    """The workers (kbench/targets.Target) started since another context last came after them."""
    return [m for m in members if m.readied and m.worker.alive and not m.context_followed]


def follow(members, make=make_and_exit) -> dict | None:
    """When any of ``members`` (every worker of the case's targets, each loaded: its context
    exists) has no context made after its own, ``make`` one and mark them all. Returns what
    ``make`` returned with "workers": how many it followed, or None when none needed it. Raises
    OtherContextError as ``make`` does; they are then left unmarked."""
    waiting = unfollowed(members)
    if not waiting:
        return None
    made = make()
    for m in waiting:
        m.context_followed = True
    return {**made, "workers": len(waiting)}
