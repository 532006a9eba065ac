"""What a test left behind: new entries in TMPDIR, processes of this test session still running.

Every test runs with a private TMPDIR (other test runs on the machine cannot blur what this one
leaves: tests/conftest.py), and every process the session starts, at any depth, carries MARK
in its environment.
"""
import os
import sys
import tempfile
import time
from pathlib import Path

MARK = "KBENCH_TEST_SESSION"


def _spares():
    """Started workers kept waiting on purpose (workers.keep_warm) and the server workers fork
    from (it lives as long as this process): not leftovers."""
    module = sys.modules.get("kbench.run.workers")
    if module is None:
        return set(), set()
    spares = list(module._spares)
    return {s.tmp for s in spares}, {s.process.pid for s in spares} | {module._server_pid()}


def session_processes() -> dict[int, str]:
    """Live processes started by this test session (any depth, orphans included), but this
    one and multiprocessing's resource tracker: pid -> command line."""
    wanted = f"{MARK}={os.environ[MARK]}".encode()
    found = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if wanted not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/status") as f:
                if "\nState:\tZ" in f.read():
                    continue  # dead, not yet reaped
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "resource_tracker" not in cmd:
            found[int(entry)] = cmd[:200]
    return found


def _own_entries() -> set[str]:
    """Folders this pytest process owns and removes itself at exit."""
    import multiprocessing.process

    own = {name for name in os.listdir(tempfile.gettempdir())
           if name.startswith(("pytest-of-", "torchinductor_"))}
    mp = multiprocessing.process.current_process()._config.get("tempdir")
    if mp:
        own.add(Path(mp).name)
    return own


def snapshot() -> tuple[set, set]:
    return set(os.listdir(tempfile.gettempdir())), set(session_processes())


def since(before: tuple[set, set], wait: float = 5.0) -> tuple[list[str], dict[int, str]]:
    """Entries and processes new since ``before`` (given ``wait`` seconds to go), but spare
    workers kept on purpose and the folders this process removes itself at exit."""
    entries_before, procs_before = before
    spare_dirs, spare_pids = _spares()
    allowed = _own_entries() | {Path(d).name for d in spare_dirs}
    deadline = time.monotonic() + wait
    while True:
        left = sorted(set(os.listdir(tempfile.gettempdir())) - entries_before - allowed)
        procs = {p: c for p, c in session_processes().items() if p not in procs_before | spare_pids}
        if (not left and not procs) or time.monotonic() >= deadline:
            return left, procs
        time.sleep(0.1)
