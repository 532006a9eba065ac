"""The worker process's loop: loads one submission (or baseline) and calls it on the parent's inputs.

Everything here runs beside untrusted code, so nothing here decides a verdict: the
worker only calls, times and hands back raw outputs (kbench/worker/timer.py does both the
calling and the timing). Every request gets a reply, whatever the submission does:
an exception, in the call or in sending the reply, becomes a ``failed`` reply naming it.
"""
from __future__ import annotations

import multiprocessing.connection
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from kbench import protocol
from kbench.errors import ContractError
from kbench.protocol import receive_trusted, send
from kbench.tasks.interface import CONTRACT
from kbench.worker import environment
from kbench.worker.timer import CallTimer
from kbench.worker.tripwires import AuditLog, Watch

# Captured before any submission code is imported: later monkeypatching of these names
# does not reach the worker.
_perf_counter = time.perf_counter


def _one_line(exc: BaseException, target: Path | None = None) -> str:
    text = str(exc).strip().splitlines()
    msg = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
    if target is not None:  # point at the innermost frame inside the submission's folder
        folder = str(target.parent)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(folder)]
        if frames:
            msg += f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return msg[:400]


def classify(exc: BaseException) -> str:
    """Status of a failed call: a dead CUDA context is a crash, a broken contract is invalid."""
    if isinstance(exc, ContractError):
        return "invalid"
    text = str(exc)
    if "CUDA error" in text or "illegal memory access" in text or "device-side assert" in text:
        return "crash"
    return "error"


class Caller:
    """Calls the entry point through the contract and times it with a CallTimer. Built before
    the submission is imported, so the functions it holds are the real ones."""

    def __init__(self, contract, device: str, flush_bytes: int):
        self.contract = contract
        self.entry = None
        self.device = device
        self.timer = CallTimer(device, flush_bytes)
        self.prepare = CONTRACT.get(contract, "prepare")

    def invoke(self, args):
        return self._checked(self.contract.call(self.entry, args))

    def _checked(self, out):
        if not isinstance(out, tuple):
            raise ContractError(f"contract returned {type(out).__name__}, expected a tuple of tensors")
        for i, t in enumerate(out):
            if type(t) is not self.timer.tensor_type:
                raise ContractError(f"output {i} is {type(t).__name__}, not a torch.Tensor")
        return out

    def call(self, request: protocol.Call):
        if not request.timed:
            return self.timer.run(self.invoke, self.prepare, request.inputs), None
        return self.timer.timed(self.invoke, self.prepare, request.inputs, graph=request.graph)

    def warmup(self, request: protocol.Warmup) -> None:
        """Timed calls whose results are dropped: compilation, autotuning, the gate's size.
        ``min_ms`` counts from the end of the first call: a first call that compiles must not
        use up the warm-up, leaving one warm call before the timed ones. A warm-up starts a case."""
        self.timer.start_case()
        self.timer.timed(self.invoke, self.prepare, request.inputs, graph=request.graph)
        start, calls = _perf_counter(), 1
        while calls < request.max_calls:
            self.timer.timed(self.invoke, self.prepare, request.inputs, graph=request.graph)
            calls += 1
            if (_perf_counter() - start) * 1e3 >= request.min_ms:
                break

    def healthy(self) -> bool:
        """After an exception: can this process still run the next case?"""
        if not self.timer.cuda:
            return True
        try:
            self.timer.sync()
            return True
        except Exception:  # noqa: BLE001 - a sticky CUDA error: the context is gone
            return False


def _watch(caller: Caller, contract) -> Watch:
    """What the timer and the channel rely on; any of it replaced later is flagged."""
    from multiprocessing.reduction import ForkingPickler

    import torch

    from kbench.worker import timer

    watch = Watch()
    watch.add("time", time, ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                             "time", "time_ns", "process_time"))
    watch.add("threading", threading, ("active_count", "enumerate"))
    watch.add("kbench.worker.loop", sys.modules[__name__])
    watch.add("kbench.worker.loop.Caller", Caller)
    watch.add("kbench.worker.timer", timer)
    watch.add("kbench.worker.timer.CallTimer", timer.CallTimer)
    watch.add("kbench.protocol", protocol)
    watch.add("caller", caller, tuple(n for n in vars(caller) if n != "entry"))
    watch.add("timer", caller.timer, tuple(n for n in vars(caller.timer)
                                           if n not in ("gate_ms", "gate_off", "enqueue_ms",
                                                        "primer", "last_call")))
    watch.add("timer.interlude", caller.timer.interlude)   # None on CPU: not watched
    watch.add("contract", contract, tuple(n for n, v in vars(contract).items() if callable(v)))
    watch.add("Connection", multiprocessing.connection.Connection)
    watch.add("ForkingPickler", ForkingPickler, ("dumps",))
    watch.add("torch.Tensor", torch.Tensor, ("clone", "copy_", "fill_", "set_", "untyped_storage"))
    watch.add("torch", torch, ("empty",))
    if caller.timer.cuda:
        watch.add("torch.cuda", torch.cuda, ("synchronize", "Event", "current_stream", "Stream", "_sleep"))
        watch.add("torch.cuda.Event", torch.cuda.Event)
        watch.add("torch._C", torch._C, ("_cuda_synchronize",))
    return watch


def _redirect_output(log_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)


def _reply(conn, message: dict, target: Path) -> bool:
    """Send a reply; if it cannot be sent (an output torch refuses to share, say), send the
    reason instead. False when not even that got through."""
    try:
        send(conn, message)
        return True
    except Exception as exc:  # noqa: BLE001
        reason = f"the reply could not be sent: {_one_line(exc, target)}"
        print(f"kbench worker: {reason}", file=sys.stderr, flush=True)
        try:
            send(conn, protocol.failed_reply("invalid", reason, healthy=True))
            return True
        except Exception:  # noqa: BLE001
            return False


def main(conn, log_path: str) -> None:
    """Entry point of the worker process (through kbench/worker/environment.py): wait for
    the assignment, load, run the contract's setup (on every case's parameters) at once,
    report ready, then answer requests until Stop."""
    try:
        os.setsid()  # own process group: the parent kills the worker and whatever it spawned
    except OSError:
        pass
    _redirect_output(log_path)
    try:
        job = receive_trusted(conn)
    except (EOFError, OSError):
        return  # the parent exited before it needed this worker
    if not isinstance(job, protocol.Assign):
        return
    # What this job asks for (the shell's variables went at the entry, kbench/worker/environment.py).
    environment.prepare_worker(job.interpret, job.cuda_connections)
    _serve_assignment(conn, job.contract_path, job.target_path, job.device, job.flush_bytes, job.setup_cases)


def _serve_assignment(conn, contract_path: str, target_path: str, device: str, flush_bytes: int,
                      setup_cases: list) -> None:
    target = Path(target_path).resolve()
    audit = AuditLog([str(target.parent)], [tempfile.gettempdir()])
    # This function's own clock, bound before the submission loads: a submission that replaces
    # the module's (the watch flags that) must not make the ready reply malformed, which would
    # turn a flagged tamper into a load failure.
    clock = _perf_counter
    steps, mark = {}, clock()

    def step(name: str) -> None:   # the load's own steps, for the run's start-up figures
        nonlocal mark
        now = clock()
        steps[name], mark = round(max(0.0, now - mark), 3), now

    try:
        import torch  # noqa: F401  (before the submission, so our captured names are the real ones)

        from kbench.tasks.interface import load_module

        contract = load_module(Path(contract_path), "_kbench_contract")
        step("contract_s")
        caller = Caller(contract, device, flush_bytes)
        step("device_s")
        watch = _watch(caller, contract)
        audit.add_own_dir(tempfile.gettempdir())  # the worker's private temp folder (Frontier code)
        audit.install()
        caller.entry = contract.load(target)
        step("entry_s")
        _warm_triton(device)
        step("triton_s")
        loaded = clock()
    except BaseException as exc:  # noqa: BLE001 - any failure to load is reported, not raised
        traceback.print_exc()
        _reply(conn, protocol.failed_reply("invalid" if isinstance(exc, ContractError) else "error",
                                           "load failed: " + _one_line(exc, target), healthy=False), target)
        return
    # Set up before the parent asks for anything: a baseline's setup (compiling FlexAttention,
    # say) then overlaps the submission's first check instead of following it.
    try:
        hook = CONTRACT.get(contract, "setup")
        if hook is not None:
            hook(caller.entry, setup_cases, device)
    except BaseException as exc:  # noqa: BLE001
        traceback.print_exc()
        _reply(conn, protocol.failed_reply(classify(exc), "setup failed: " + _one_line(exc, target),
                                           healthy=False), target)
        return
    ready = {"kind": "ready", "pid": os.getpid(), "setup_s": round(clock() - loaded, 3), "load": steps}
    if not _reply(conn, ready, target):
        return
    profile_dir = os.environ.get("KBENCH_PROFILE_DIR")
    if profile_dir:  # a developer's view of the worker's own cost per request (docs/measurement.md)
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            _serve(conn, caller, contract, audit, watch, target)
        finally:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"worker-{target.stem}-{os.getpid()}.prof"))
        return
    _serve(conn, caller, contract, audit, watch, target)


def _warm_triton(device: str) -> None:
    """Triton's first launch in a process hashes Triton's own sources and library for its cache
    key: 0.46 s of the first call on the H100 host, in every process. Done at load, a pool's
    workers pay it side by side while they start, instead of one after another inside the first
    cases they time (docs/measurement.md, "Processes"). Only when the submission imported Triton."""
    if not device.startswith("cuda") or "triton" not in sys.modules:
        return
    try:
        try:
            from triton.runtime.cache import triton_key
        except ImportError:   # older Triton kept it here
            from triton.compiler.compiler import triton_key
        triton_key()   # cached for the process (functools.lru_cache)
    except Exception:  # noqa: BLE001 - a Triton without it only loses the head start
        pass


def _serve(conn, caller: Caller, contract, audit: AuditLog, watch: Watch, target: Path) -> None:
    """Answer requests until Stop or a closed channel."""
    while True:
        try:
            request = receive_trusted(conn)
        except (EOFError, OSError):
            return
        if isinstance(request, protocol.Stop):
            return
        outputs, sample = None, None
        try:
            if isinstance(request, protocol.AfterRun):
                hook = CONTRACT.get(contract, "after_run")
                if hook is not None:
                    hook(caller.entry)
            elif isinstance(request, protocol.Warmup):
                caller.warmup(request)
            elif isinstance(request, protocol.Call):
                outputs, sample = caller.call(request)
            else:
                raise RuntimeError(f"unknown request {type(request).__name__}")
            report = {"events": audit.take(), "tampered": watch.changed()}
            message = protocol.done_reply(outputs, sample, report)
        except BaseException as exc:  # noqa: BLE001
            traceback.print_exc()
            status = classify(exc)
            healthy = status != "crash" and caller.healthy()
            message = protocol.failed_reply(status if healthy or status == "invalid" else "crash",
                                            _one_line(exc, target), healthy)
        del outputs, request
        if not _reply(conn, message, target):
            return
        del message
