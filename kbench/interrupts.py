"""Ctrl-C and SIGTERM: one line, exit 130 (143), nothing left behind, whatever the moment.

The ``kbench`` command installs ``install()`` before anything else (kbench/cli/main.py). The
handler never raises KeyboardInterrupt (a traceback from wherever the main thread was:
importing torch, waiting on a worker, in a ``finally``); it ends the run itself: kills every
worker process registered here and whatever those started, removes every folder registered
here and multiprocessing's own temp folder, writes ``kbench: interrupted`` and exits.

What is registered must match what exists at any moment the handler can run, so code that
creates or removes a registered thing does it inside ``critical()``: a signal arriving then
is acted on when the section ends. Workers are started with SIGINT blocked, a mask they
inherit: the terminal's Ctrl-C reaches the whole process group, and a worker that has not yet
left it (kbench/worker/loop.py calls setsid) would otherwise print its own KeyboardInterrupt.
Nothing here imports torch.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_tracked: dict[str, object] = {}   # folder -> the process using it (None once it is reaped)
_depth = 0                         # critical sections entered
_pending: int | None = None        # a signal that arrived inside one
_installed = False
_last_words: list = []             # callables returning a line to say before "interrupted"


def on_interrupt(say) -> None:
    """Call ``say()`` first when interrupted (it may stop what it started); the line it returns,
    if any, is written before ``kbench: interrupted`` (kbench/scaleout/gpus.py: the missing cases)."""
    _last_words.append(say)


def forget(say) -> None:
    if say in _last_words:
        _last_words.remove(say)


def track(folder: str, process=None) -> None:
    """Remove ``folder`` (and kill ``process``, a multiprocessing.Process) on an interrupt."""
    _tracked[folder] = process


def untrack(folder: str) -> None:
    _tracked.pop(folder, None)


@contextmanager
def critical():
    """Hold a signal until the block is done: the registry is consistent again then."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _pending is not None and _installed:
            _finish(_pending)


@contextmanager
def sigint_blocked():
    """SIGINT blocked in this thread: a process forked now starts with it blocked."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def install() -> None:
    """From now on SIGINT and SIGTERM end the run cleanly (the ``kbench`` command only: a
    library user keeps Python's own KeyboardInterrupt)."""
    global _installed
    for sig in SIGNALS:
        signal.signal(sig, _handler)
    _installed = True


def _handler(signum, frame) -> None:
    global _pending
    if _depth:
        _pending = signum
        return
    _finish(signum)


def _finish(signum: int) -> None:
    for sig in SIGNALS:  # a second Ctrl-C must not cut the clean-up short
        signal.signal(sig, signal.SIG_IGN)
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - the signal may have come in the middle of a write
        pass
    # Other threads' last words (multiprocessing's fd-sharing thread, when a worker dies in the
    # middle of fetching an input) would be tracebacks: stderr is ours alone from here.
    err = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    words = []
    try:
        for say in list(_last_words):
            try:
                line = say()
            except Exception:  # noqa: BLE001 - the clean-up below must still run
                line = None
            if line:
                words.append(f"kbench: {line}\n".encode())
        cleanup()
    finally:
        os.write(err, (b"\r\033[K" if os.isatty(err) else b"") + b"".join(words) + b"kbench: interrupted\n")
        os._exit(128 + signum)


def exit(code) -> None:
    """End the command with ``code`` (a SystemExit's): the atexit hooks run with the handler
    still in force, then the process ends without the interpreter's own shutdown, which puts
    Python's default SIGINT back (a Ctrl-C then would print a traceback, or kill it with
    nothing said)."""
    import atexit

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more can be said
            pass
    os._exit(code)


def _kill(process) -> None:
    popen = getattr(process, "_popen", None)
    if popen is None or popen.returncode is not None:
        return  # never started, or reaped: its number may belong to another process now
    pid = process.pid  # not reaped: still ours, and so is the group it leads
    for kill in (os.killpg, os.kill):  # its own group after setsid (and what it started), else itself
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def cleanup() -> None:
    """Kill every registered process, wait for it, remove every registered folder."""
    items = list(_tracked.items())
    for _, process in items:
        if process is not None:
            _kill(process)
    for _, process in items:
        if process is not None:
            try:
                process.join(5)
            except (AssertionError, ValueError, OSError):
                pass
    for folder, _ in items:
        shutil.rmtree(folder, ignore_errors=True)
        untrack(folder)
    # multiprocessing's folder for its sockets (sharing tensors' file descriptors), removed at a
    # normal exit by an atexit hook the handler's os._exit skips
    mp = sys.modules.get("multiprocessing.process")
    folder = mp.current_process()._config.get("tempdir") if mp is not None else None
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
