"""The spawned worker's entry point, importable without torch (kbench/spare_workers.py)."""
import signal


def main(conn, log_path: str) -> None:
    # Spawned with SIGINT blocked (kbench/interrupts.py): ignored for good, the parent stops workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    from . import worker  # torch and the rest: here, in the worker, not in the parent

    worker.main(conn, log_path)
