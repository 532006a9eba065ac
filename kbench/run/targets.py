"""Submissions and baselines as the runner sees them, and the worker processes behind them.

Submissions and baselines as the runner sees them: a worker that is restarted after
failures and keeps its tripwire flags, and the fingerprint of kbench's files and the environment.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import site
import time
from pathlib import Path

from kbench import interrupts, protocol
from kbench.protocol import Failure, UnsafeReply, receive_untrusted, send
from kbench.run import workers
from kbench.run.records import tripwire_flags
from kbench.tasks.task import Task


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
        self.context_followed = False  # another CUDA context was made after this worker's (kbench/run/workers.py)
        self.setup_cases: list[dict] = []
        self.started = 0.0
        # Seconds from start() to the ready reply as this process saw it (a baseline is only
        # waited for after the submission's first check), and setup's share and the load's steps
        # (protocol.LOAD_STEPS, the worker's clock), summed over restarts.
        self.startup: dict[str, float] = {}

    def _absorb(self, reply) -> None:
        if isinstance(reply, protocol.Done):
            self.flags += [f for f in tripwire_flags(reply.report) if f not in self.flags]

    def take_flags(self) -> list[str]:
        out, self.flags = self.flags, []
        return out

    def start(self, setup_cases: list[dict]) -> None:
        """Start the worker: it loads the target and runs the contract's setup on its own."""
        self.setup_cases = setup_cases
        self.worker = WorkerProcess(self.task.contract_path, self.path, self.options.device,
                                    flush_bytes=self.flush,
                                    interpret=self.options.device == "cpu",
                                    timeout=self.options.timeout, setup_cases=setup_cases,
                                    cuda_connections=self.options.cuda_connections)
        self.worker.start()
        self.context_followed = False
        self.started = time.perf_counter()

    def ready(self) -> Failure | None:
        """Wait for the worker started by start() to load and set up; the failure if it could not."""
        self.readied = True
        self.load_failure = self.worker.wait_ready()
        self.startup["ready_s"] = round(self.startup.get("ready_s", 0.0) + time.perf_counter() - self.started, 2)
        if self.worker.setup_s is not None:
            self.startup["setup_s"] = round(self.startup.get("setup_s", 0.0) + self.worker.setup_s, 2)
        for step, seconds in self.worker.load_steps.items():
            self.startup[step] = round(self.startup.get(step, 0.0) + seconds, 2)
        return self.load_failure

    def ensure_running(self) -> Failure | None:
        """Wait for the worker, or restart it if a failure stopped it; the load failure if it
        cannot load."""
        if not self.readied:
            self.ready()
        elif self.load_failure is None and not self.worker.alive:
            self.worker.cleanup()
            self.start(self.setup_cases)
            self.ready()
        return self.load_failure

    def request(self, message, what: str, timeout: float | None = None):
        """A ``protocol.Done`` or a Failure; the worker survives Python exceptions."""
        reply = self.worker.request(message, timeout=timeout, what=what)
        self._absorb(reply)
        return reply

    def ask_to_stop(self) -> None:
        """Tell the worker to exit without waiting: close() then joins (workers exit in parallel)."""
        if self.worker is not None:
            self.worker.ask_to_stop()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.cleanup()


class Replicas:
    """One submission or baseline in a pool of worker processes (``--pool``). Each process has
    a fixed offset of its own (~1% on the H100, drawn when it starts, independently of the
    run's other processes as far as the measured runs show). A case is
    timed in ``per_case`` of them (``--processes``), taking turns, and the next case in the
    next ones round the pool: a case costs ``per_case`` processes' warm-ups, and a suite's
    geomean averages over the whole pool (docs/measurement.md, "Processes")."""

    def __init__(self, members: list[Target], per_case: int):
        self.members = members
        self.label = members[0].label
        self.strict = members[0].strict
        self.per_case = max(1, min(per_case, len(members)))
        self.first = 0   # the pool index of this case's first process

    def __len__(self) -> int:
        """Processes per case."""
        return self.per_case

    def begin_case(self, index: int) -> None:
        """Case ``index`` (0-based, in run order) goes to the next ``per_case`` processes. Where
        they go round a pool in whole steps (8 by 2), each time round starts one later, so the
        cases link every process to the others (0-1, 2-3, ..., then 1-2, 3-4, ...), not fixed
        pairs: a run's records then place each process's offset against all of them
        (kbench/stats/estimates.py)."""
        size, start = len(self.members), index * self.per_case
        shift = start // size if size % self.per_case == 0 and size > self.per_case else 0
        self.first = (start + shift) % size

    @property
    def window(self) -> list[int]:
        """This case's processes, as indices into the pool."""
        return [(self.first + i) % len(self.members) for i in range(self.per_case)]

    @property
    def load_failure(self) -> Failure | None:
        return next((m.load_failure for m in self.members if m.load_failure), None)

    @property
    def startup(self) -> dict:
        """Each process's start-up seconds: the slowest, since they start together."""
        keys = {k for m in self.members for k in m.startup}
        return {k: max(m.startup.get(k, 0.0) for m in self.members) for k in sorted(keys)}

    def start(self, setup_cases: list[dict]) -> None:
        for m in self.members:
            m.start(setup_cases)

    def ready(self) -> Failure | None:
        """Wait for this case's first process (the one that takes the first checked call)."""
        return self.members[self.first].ready()

    def ensure_running(self, every: bool = False) -> Failure | None:
        """This case's first process running, or the load failure. ``every``: the whole pool
        loaded first, then all of this case's processes. The pool starts together, and a
        process still loading (CUDA's start-up, Triton's) would run on the device beside a
        timed call of another; an untimed first check may overlap it, so a submission that
        fails every case is rejected without waiting for the pool."""
        if every:
            for m in self.members:
                if not m.readied:
                    m.ready()
            if self.load_failure:
                return self.load_failure
        for i in self.window if every else self.window[:1]:
            failure = self.members[i].ensure_running()
            if failure:
                return failure
        return None

    def request(self, message, what: str, process: int = 0, timeout: float | None = None):
        """To this case's ``process``-th process (``timeout``: this request's, else the run's)."""
        return self.members[self.window[process]].request(message, what, timeout)

    def end_of_run(self, what: str) -> Failure | None:
        """The contract's end-of-run check in every loaded process that still runs: each has
        its own compile caches (block_sparse_attn), so JIT during timing in one process shows
        in that one alone. A process that died took its state with it (its failure is on its
        case); one a short suite never used passes it, having run nothing since setup."""
        for m in self.members:
            if m.readied and m.load_failure is None and m.worker.alive:   # readied: it has a worker
                reply = m.request(protocol.AfterRun(), what)
                if isinstance(reply, Failure):
                    return reply
        return None

    def take_flags(self) -> list[str]:
        out = []
        for m in self.members:
            out += [f for f in m.take_flags() if f not in out]
        return out

    def ask_to_stop(self) -> None:
        for m in self.members:
            m.ask_to_stop()

    def close(self) -> None:
        for m in self.members:
            m.close()


# -- worker process ------------------------------------------------------------------------
# Parent-side handle on a worker process: start it, ask it things with a deadline, kill it.

LOG_TAIL_BYTES = 8192
LOAD_TIMEOUT_S = 120.0
# Most telling first: CUDA's own message, a Python exception line, then anything error-like.
_ERROR_LINES = (re.compile(r"CUDA error|illegal memory access|device-side assert triggered"),
                re.compile(r"^[A-Za-z_.]*(Error|Exception)\b.*:"),
                re.compile(r"(Error|Exception|error:|Fatal|Segmentation fault|Aborted|core dumped)"))


class WorkerProcess:
    """One worker process holding one loaded submission or baseline."""

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
        """Take a started worker (kbench/run/workers.py) and tell it what to load."""
        bare = workers.take()
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
