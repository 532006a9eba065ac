"""The per-GPU children of ``kbench eval --gpus``, and starting them early.

Light on purpose (no torch): ``kbench/launch.py`` starts the children here before the parent
imports torch, as it does a plain run's workers, so their start-up (Python, torch, CUDA, the
card's calibration: ~3 s) overlaps the parent's own instead of following it. The children are
kbench's own processes (kbench/gpu_child.py); the submission never runs in them.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

from . import interrupts

_prestarted: dict[str, "Child"] = {}   # label -> a child started before the run asked for it


def gpu_count() -> int:
    """The GPUs this process may use, without importing torch: CUDA_VISIBLE_DEVICES's entries
    (up to the first invalid one, as CUDA reads it) or the driver's list; 0 if neither says."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        present = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        present = 0
    if visible is None:
        return present
    entries = [e.strip() for e in visible.split(",")]
    count = 0
    for entry in entries:
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(count, present) if present else count


def slots(gpus: list[int]) -> list[tuple[str, dict]]:
    """(label, environment) per GPU index as CUDA numbers them in this process."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else None
    return [(f"cuda:{g}", {"CUDA_VISIBLE_DEVICES": names[g] if names else str(g)}) for g in gpus]


def prestart(gpus_text: str, workers: int) -> None:
    """Start the children ``--gpus gpus_text`` will want (each with ``workers`` workers), now.
    Nothing when the text does not parse: the run reports that itself."""
    try:
        wanted = parse_gpus(gpus_text, gpu_count())
    except ValueError:
        return
    import atexit

    atexit.register(discard_prestarted)   # a run that ends before it takes them (a usage error)
    for label, env in slots(wanted):
        _prestarted[label] = Child(label, env, "cuda", workers)


def child_for(label: str, env: dict, device: str, workers: int) -> "Child":
    """A started child for this slot: the one started early if it matches, else a new one."""
    early = _prestarted.pop(label, None)
    if early is not None and (early.env, early.device, early.workers) == (env, device, workers):
        return early
    if early is not None:
        early.discard()
    return Child(label, env, device, workers)


def discard_prestarted() -> None:
    """Stop the children started early that the run did not use."""
    while _prestarted:
        _prestarted.popitem()[1].discard()


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


class Child:
    """One child process and the unit it is running."""

    def __init__(self, label: str, env: dict, device: str, workers: int):
        self.label = label
        self.env, self.device, self.workers = env, device, workers
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

    def discard(self) -> None:
        self.close()
        self.stop(signal.SIGTERM, wait=5.0)
        self.stop(signal.SIGKILL)
        self.remove()

    def remove(self) -> None:
        import shutil

        self.log.close()
        with interrupts.critical():
            shutil.rmtree(self.tmp, ignore_errors=True)
            interrupts.untrack(self.tmp)
