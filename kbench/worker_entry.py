"""The spawned worker's entry point, importable without torch (kbench/spare_workers.py)."""
import os
import signal
import threading


def main(conn, log_path: str, quiet: bool = False) -> None:
    # Spawned with SIGINT blocked (kbench/interrupts.py): ignored for good, the parent stops workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    from . import worker_env

    worker_env.strip()   # before torch's import, whatever it imports with it (kbench/worker_env.py)
    if quiet:
        _import_quietly()
    from . import worker  # torch and the rest: here, in the worker, not in the parent

    worker.main(conn, log_path)


def _import_quietly() -> None:
    """Import the worker's modules (torch: seconds of CPU) in a thread at the lowest priority, for
    a spare started while another unit's cases are timed (kbench/gpu_child.py): the import then
    takes only the CPU time the timed processes leave. Linux's nice value is per thread, so the
    main thread, which later loads and times the submission, keeps its own. Anything that fails
    here is imported again, and reported, by the main thread."""
    own = os.getpriority(os.PRIO_PROCESS, 0)   # on Linux, this thread's

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            from . import worker  # noqa: F401
        except BaseException:  # noqa: BLE001
            pass

    thread = threading.Thread(target=run, name="kbench-quiet-import")
    thread.start()
    thread.join()
    # Threads the imports started (torch starts two, idle) inherited the lowest priority; give
    # them the main thread's back where that is allowed (root; other users may only lower one).
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:   # no /proc: nothing to set back
        threads = []
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), own)
        except OSError:
            pass
