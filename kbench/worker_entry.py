"""The spawned worker's entry point, importable without torch (kbench/spare_workers.py)."""


def main(conn, log_path: str) -> None:
    from . import worker  # torch and the rest: here, in the worker, not in the parent

    worker.main(conn, log_path)
