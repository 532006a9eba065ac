"""The worker process: loads one submission (or baseline) and calls it on inputs from the parent.

Everything here runs beside untrusted code, so nothing here decides a verdict: the
worker only calls, times and hands back raw output tensors. The parent checks them.
"""
from __future__ import annotations

import math
import multiprocessing.connection
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from . import channel
from .channel import receive_trusted, send
from .errors import ContractError
from .tripwires import AuditLog, Watch

# Captured before any submission code is imported, so later monkeypatching of these
# names (time.perf_counter, threading.active_count, ...) does not reach the timer; the
# torch ones are captured in _Runner, also before the submission is loaded.
_perf_counter = time.perf_counter
_active_count = threading.active_count


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


class _Runner:
    """Calls and times the entry point. Built before the submission is imported, so the torch
    functions it holds are the real ones whatever the submission patches later."""

    def __init__(self, contract, device: str, flush_bytes: int, target: Path):
        import torch

        self.torch = torch
        self.contract = contract
        self.entry = None
        self.device = device
        self.target = target
        self.flush_elems = flush_bytes // 4
        self.cuda = device == "cuda"
        self.clone = torch.Tensor.clone
        self.storage = torch.Tensor.untyped_storage
        self.empty = torch.empty
        self.fill = torch.Tensor.fill_
        if self.cuda:
            self.sync = torch.cuda.synchronize
            self.event = torch.cuda.Event
            self.record = torch.cuda.Event.record
            self.elapsed = torch.cuda.Event.elapsed_time
        self.prepare = getattr(contract, "prepare", lambda inputs: inputs)
        self.threads_at_start = {t.ident for t in threading.enumerate()}
        self.clock = _perf_counter
        self.flush = self._poison_and_flush  # bound now: patching the class later changes nothing
        self.threads_at_return = 0   # most threads started in one call and alive when it returned

    def extra_threads(self) -> int:
        """Python threads started since the submission was loaded, not counting the one
        multiprocessing starts to hand file descriptors of shared CPU tensors to the parent."""
        def ours(t):
            target = getattr(t, "_target", None)
            return getattr(target, "__module__", "") == "multiprocessing.resource_sharer"
        return sum(1 for t in threading.enumerate() if t.ident not in self.threads_at_start and not ours(t))

    def _invoke(self, args):
        """One call; notes threads it started that are still running when it returns."""
        before = _active_count()
        out = self.contract.call(self.entry, args)
        self.threads_at_return = max(self.threads_at_return, _active_count() - before)
        return out

    def _outputs(self, out, inputs):
        """Snapshot semantics: the outputs as they are when the call (and the device) is done.

        Outputs are copied right away, so a background thread or late side-stream work that
        fills them afterwards is not seen. An output sharing memory with an input (a cache
        updated in place) is the parent's own buffer and is sent back as it is."""
        if not isinstance(out, tuple):
            raise ContractError(f"contract returned {type(out).__name__}, expected a tuple of tensors")
        for i, t in enumerate(out):
            if type(t) is not self.torch.Tensor:
                raise ContractError(f"output {i} is {type(t).__name__}, not a torch.Tensor")
        shared = {self.storage(v).data_ptr() for v in inputs.values() if type(v) is self.torch.Tensor}
        snap = tuple(t if self.storage(t).data_ptr() in shared else self.clone(t) for t in out)
        if self.cuda:
            self.sync()
        return snap

    def _poison_and_flush(self):
        """Overwrite a buffer >= 2x L2 with NaN and free it: L2 holds no inputs, and freed
        memory the submission's next allocation may reuse holds NaN, not old answers."""
        scratch = self.empty(self.flush_elems, device=self.device)
        self.fill(scratch, math.nan)
        del scratch

    def check(self, inputs_list):
        outs = []
        for inputs in inputs_list:
            out = self._invoke(self.prepare(inputs))
            if self.cuda:
                self.sync()
            outs.append(self._outputs(out, inputs))
            del out
        return outs, None

    def warmup(self, inputs_list, min_ms: float, max_calls: int):
        start = self.clock()
        calls = 0
        while calls < max_calls:
            self._invoke(self.prepare(inputs_list[calls % len(inputs_list)]))
            calls += 1
            if self.cuda:
                self.sync()
            if calls >= 2 and (self.clock() - start) * 1e3 >= min_ms:
                break
        return None, None

    def time(self, inputs_list, graph: bool = False):
        """Timed calls. Each sample is (event_ms, settle_ms, host_ms):

        - event_ms: CUDA events around the call on the current stream. The call is
          enqueued right behind the flush, without a synchronize, so (as with
          triton's do_bench, which the original challenges used) host overhead shorter
          than the flush is hidden and the figure is the device's time;
        - settle_ms: from the start event to an event recorded after a device-wide
          synchronize: includes work left running on other streams;
        - host_ms: the host's time inside the call.

        With ``graph`` (--cuda-graph) the call is captured into a CUDA graph outside the
        timed region and the replay is timed: launch gaps and host overhead disappear,
        leaving the device time of the work itself; host_ms is then the capture's.
        """
        outs, samples = [], []
        for inputs in inputs_list:
            args = self.prepare(inputs)
            if self.cuda and graph:
                out, sample = self._time_graph(args)
                samples.append(sample)
            elif self.cuda:
                start, end, done = (self.event(enable_timing=True) for _ in range(3))
                self.flush()  # last before the call: the host's window is the flush
                self.record(start)
                t0 = self.clock()
                out = self._invoke(args)
                t1 = self.clock()
                self.record(end)
                self.sync()  # device-wide: work hidden on side streams is waited for here
                self.record(done)
                self.sync()
                samples.append((self.elapsed(start, end), self.elapsed(start, done), (t1 - t0) * 1e3))
            else:
                t0 = self.clock()
                out = self._invoke(args)
                t1 = self.clock()
                samples.append(((t1 - t0) * 1e3,) * 3)
            outs.append(self._outputs(out, inputs))
            del out
        return outs, samples


    def _time_graph(self, args):
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        t0 = self.clock()
        try:
            with torch.cuda.graph(graph):
                out = self._invoke(args)
        except ContractError:
            raise
        except Exception as exc:  # noqa: BLE001 - capture rules (no sync, no host reads)
            raise RuntimeError(f"not capturable in a CUDA graph (--cuda-graph): "
                               f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        t1 = self.clock()
        start, end, done = (self.event(enable_timing=True) for _ in range(3))
        self.flush()
        self.record(start)
        graph.replay()
        self.record(end)
        self.sync()
        self.record(done)
        self.sync()
        return out, (self.elapsed(start, end), self.elapsed(start, done), (t1 - t0) * 1e3)


def _watch(runner: _Runner, contract) -> Watch:
    """What the timer and the channel rely on; any of it replaced later is flagged."""
    import torch
    from multiprocessing.reduction import ForkingPickler

    watch = Watch()
    watch.add("time", time, ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                             "time", "time_ns", "process_time"))
    watch.add("threading", threading, ("active_count", "enumerate"))
    watch.add("kbench.worker", sys.modules[__name__])
    watch.add("kbench.worker._Runner", _Runner)
    watch.add("kbench.channel", channel)
    watch.add("runner", runner, tuple(n for n in vars(runner) if n not in ("entry", "threads_at_return")))
    watch.add("contract", contract, tuple(n for n, v in vars(contract).items() if callable(v)))
    watch.add("Connection", multiprocessing.connection.Connection)
    watch.add("ForkingPickler", ForkingPickler, ("dumps",))
    watch.add("torch.Tensor", torch.Tensor, ("clone", "fill_", "untyped_storage"))
    watch.add("torch", torch, ("empty",))
    if runner.cuda:
        watch.add("torch.cuda", torch.cuda, ("synchronize", "Event", "current_stream", "Stream"))
        watch.add("torch.cuda.Event", torch.cuda.Event)
        watch.add("torch._C", torch._C, ("_cuda_synchronize",))
    return watch


def main(conn, contract_path: str, target_path: str, device: str, log_path: str,
         flush_bytes: int, extra_paths: tuple[str, ...] = ()) -> None:
    """Entry point of the spawned worker process."""
    try:
        os.setsid()  # own process group: the parent kills the worker and whatever it spawned
    except OSError:
        pass
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    target = Path(target_path).resolve()
    audit = AuditLog([str(target.parent)], [tempfile.gettempdir()])
    try:
        import torch  # noqa: F401  (before the submission, so our captured names are the real ones)

        from .loader import load_module

        contract = load_module(Path(contract_path), "_kbench_contract")
        compat = getattr(contract, "COMPAT_DIR", None)
        paths = [str(target.parent)]
        if compat:
            paths.append(str((Path(contract_path).parent / compat).resolve()))
        sys.path[:0] = paths + list(extra_paths)
        runner = _Runner(contract, device, flush_bytes, target)
        watch = _watch(runner, contract)
        audit.add_own_dir(tempfile.gettempdir())  # the worker's private temp folder (Frontier code)
        audit.install()
        entry = runner.entry = contract.load(target)
    except BaseException as exc:  # noqa: BLE001 - any failure to load is reported, not raised
        send(conn, ("failed", "invalid" if isinstance(exc, ContractError) else "error",
                    "load failed: " + _one_line(exc, target)))
        return
    send(conn, ("ready", {"pid": os.getpid()}))

    while True:
        try:
            message = receive_trusted(conn)
        except EOFError:
            return
        kind = message[0]
        if kind == "stop":
            return
        try:
            if kind == "setup":
                hook = getattr(contract, "setup", None)
                if hook is not None:
                    hook(entry, message[1], device)
                reply = ("ok", None, None)
            elif kind == "after_run":
                hook = getattr(contract, "after_run", None)
                if hook is not None:
                    hook(entry)
                reply = ("ok", None, None)
            elif kind == "check":
                reply = ("ok", *runner.check(message[1]))
            elif kind == "warmup":
                reply = ("ok", *runner.warmup(message[1], message[2], message[3]))
            elif kind == "time":
                reply = ("ok", *runner.time(message[1], graph=len(message) > 2 and bool(message[2])))
            else:
                reply = ("failed", "error", f"unknown request {kind!r}")
            reply = reply + ({"extra_threads": runner.extra_threads(),
                              "threads_at_return": runner.threads_at_return,
                              "events": audit.take(), "tampered": watch.changed()},)
        except BaseException as exc:  # noqa: BLE001
            reply = ("failed", classify(exc), _one_line(exc, target))
        send(conn, reply)
        del reply
