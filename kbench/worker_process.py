"""Parent-side handle on a worker process: start it, ask it things with a deadline, kill it."""
from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

from . import interrupts, protocol, spare_workers
from .channel import UnsafeReply, receive_untrusted, send
from .protocol import Failure

LOG_TAIL_BYTES = 8192
LOAD_TIMEOUT_S = 120.0
# Most telling first: CUDA's own message, a Python exception line, then anything error-like.
_ERROR_LINES = (re.compile(r"CUDA error|illegal memory access|device-side assert triggered"),
                re.compile(r"^[A-Za-z_.]*(Error|Exception)\b.*:"),
                re.compile(r"(Error|Exception|error:|Fatal|Segmentation fault|Aborted|core dumped)"))


class WorkerProcess:
    """One spawned worker holding one loaded submission or baseline."""

    def __init__(self, contract_path: Path, target: Path, device: str, *, flush_bytes: int,
                 interpret: bool, timeout: float, setup_cases: list, cuda_connections: int | None = None):
        self.contract_path = Path(contract_path)
        self.target = Path(target)
        self.device = device
        self.flush_bytes = flush_bytes
        self.interpret = interpret
        self.timeout = timeout
        self.setup_cases = setup_cases
        self.cuda_connections = cuda_connections
        self.setup_s: float | None = None   # from the ready reply
        self.load_steps: dict[str, float] = {}   # the same: the load's steps (protocol.LOAD_STEPS)
        self.process = None
        self.conn = None
        self.stop_sent = False
        # The worker's private folder (its log, its TMPDIR), removed by cleanup() so nothing
        # is left behind; set by start().
        self.tmp: str | None = None
        self.log_path = os.devnull

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        """Take a started worker (kbench/spare_workers.py) and tell it what to load."""
        bare = spare_workers.take()
        self.process, self.conn, self.tmp, self.log_path = bare.process, bare.conn, bare.tmp, bare.log_path
        self.stop_sent = False
        try:
            send(self.conn, protocol.Assign(str(self.contract_path), str(self.target), self.device,
                                            self.flush_bytes, self.interpret, self.setup_cases,
                                            self.cuda_connections))
        except (OSError, ValueError):
            pass  # a dead worker: wait_ready reports it

    def wait_ready(self, timeout: float | None = None) -> Failure | None:
        """The reply after load and setup: ``None`` when ready, else a Failure."""
        # Loading imports torch (and triton, flashinfer...) in a fresh process: seconds on a
        # slow host; setup may compile. Load gets LOAD_TIMEOUT_S, setup the per-request timeout.
        reply = self._receive(timeout or LOAD_TIMEOUT_S + self.timeout, "loading the submission and its setup",
                              outputs=False, timed=False)
        if isinstance(reply, protocol.Ready):
            self.setup_s, self.load_steps = reply.setup_s, reply.load
            return None
        self.stop()
        if isinstance(reply, Failure):
            return reply
        return Failure("invalid", "the worker did not report ready")

    def ask_to_stop(self) -> None:
        """Send Stop and return: the worker's exit (CUDA teardown, ~1 s) overlaps other work."""
        if self.process is not None and self.process.is_alive() and not self.stop_sent:
            self.stop_sent = True
            try:
                send(self.conn, protocol.Stop())
            except (OSError, ValueError):
                pass

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.is_alive():
            self.ask_to_stop()
            self.process.join(2)
        if self.process.is_alive():
            self._kill()
        self._kill_group()
        self.process = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def cleanup(self) -> None:
        self.stop()
        if self.tmp is not None:
            with interrupts.critical():
                shutil.rmtree(self.tmp, ignore_errors=True)
                interrupts.untrack(self.tmp)

    def _kill_group(self) -> None:
        """Processes the submission started (the worker leads its own process group)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, TypeError, OSError):
            pass

    def _kill(self) -> None:
        try:
            os.kill(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass
        self.process.join(5)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    # -- requests -----------------------------------------------------------------------
    def request(self, message, timeout: float | None = None, what: str = "the call"):
        """Send one request; a ``protocol.Done`` or a Failure. After a Failure the worker is
        stopped unless it says it survived (``healthy``: a Python exception in the call)."""
        if not self.alive:
            return Failure("crash", "worker is not running")
        try:
            send(self.conn, message)
        except (OSError, ValueError) as exc:
            failure = self._death_failure(f"worker gone ({exc})")
            self.stop()
            return failure
        call = isinstance(message, protocol.Call)
        reply = self._receive(timeout or self.timeout, what, outputs=call, timed=call and message.timed)
        if isinstance(reply, protocol.Done):
            return reply
        if not isinstance(reply, Failure):
            reply = Failure("invalid", f"unexpected worker reply {type(reply).__name__}")
        if not reply.healthy:
            self.stop()
        return reply

    def _receive(self, timeout: float, what: str, *, outputs: bool, timed: bool):
        deadline = time.monotonic() + timeout
        while True:
            if self.conn.poll(0.05):
                try:
                    raw = receive_untrusted(self.conn, max(deadline - time.monotonic(), 5.0))
                except UnsafeReply as exc:
                    self.stop()
                    return Failure("invalid", str(exc))
                except (EOFError, OSError):
                    failure = self._death_failure("worker closed its channel")
                    self.stop()
                    return failure
                return protocol.parse_reply(raw, outputs=outputs, timed=timed)
            if not self.process.is_alive():
                failure = self._death_failure("worker exited")
                self.stop()
                return failure
            if time.monotonic() > deadline:
                self._kill()
                self.stop()
                return Failure("timeout", f"no answer after {timeout:g} s while {what}")

    def _death_failure(self, fallback: str) -> Failure:
        self.process.join(1)
        code = self.process.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            reason = f"worker killed by {name}"
        elif code is not None:
            reason = f"worker exited with code {code} mid-call"
        else:
            reason = fallback
        tail = self.log_tail()
        if tail:
            reason += f"; last output: {tail}"
        return Failure("crash", reason)

    def log_tail(self) -> str:
        """The worker's last error line (a Python exception, CUDA's or the C runtime's), else
        its last line: warnings printed after the error must not hide it."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - LOG_TAIL_BYTES))
                lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        lines = [line for line in lines if not line.startswith("frame #")]  # C++ stack frames
        for pattern in _ERROR_LINES:
            errors = [line for line in lines if pattern.search(line)]
            if errors:
                return errors[-1][:200]
        return (lines or [""])[-1][:200]
