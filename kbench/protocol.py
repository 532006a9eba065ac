"""What the trusted parent and a worker say to each other, and the private channel it travels on.

Requests go parent -> worker as pickled dataclasses (the worker trusts the parent).
Replies go worker -> parent as plain dicts, lists, numbers, strings and tensors only (the
parent's unpickler rebuilds nothing else, see channel.py), and ``parse_reply`` turns them
into ``Ready``, ``Done`` or ``Failure`` after checking every field: a malformed reply is
the submission's fault (``invalid``), never the parent's crash.
"""
from __future__ import annotations

import io
import math
import os
import pickle
import select
import struct
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)


@dataclass(frozen=True)
class Assign:
    """The first message to a worker: what to load, on which device, and the cases whose
    parameters the contract's setup gets (kbench/run/workers.py)."""

    contract_path: str
    target_path: str
    device: str
    flush_bytes: int
    interpret: bool       # run Triton kernels in its interpreter (CPU mode)
    setup_cases: list
    # CUDA_DEVICE_MAX_CONNECTIONS for this worker (--cuda-connections); None: CUDA's default
    cuda_connections: int | None = None


@dataclass(frozen=True)
class Call:
    """One call on one input set: checked only (``timed`` False) or timed."""

    inputs: dict
    timed: bool
    graph: bool = False  # --cuda-graph: time a replay of the captured call


@dataclass(frozen=True)
class Warmup:
    inputs: dict
    min_ms: float
    max_calls: int
    graph: bool = False


@dataclass(frozen=True)
class AfterRun:
    pass


@dataclass(frozen=True)
class Stop:
    pass


# -- replies (worker -> parent) ---------------------------------------------------------
@dataclass
class Failure:
    """A request that produced no usable reply; ``status`` is one of the case statuses.
    ``healthy``: the worker survived it (a Python exception) and can take the next case."""

    status: str
    reason: str
    healthy: bool = False


@dataclass
class Report:
    """What the worker's tripwires saw during the request (short strings, bounded)."""

    events: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)


# The worker's load, step by step (kbench/worker/loop.py): the contract's module, the device and the
# timer (CUDA's context, the flush's kernels), the submission's entry point, Triton's cache key.
LOAD_STEPS = ("contract_s", "device_s", "entry_s", "triton_s")


@dataclass
class Ready:
    pid: int
    setup_s: float   # the worker's own clock: how long the contract's setup took
    load: dict = field(default_factory=dict)   # LOAD_STEPS -> seconds, the worker's own clock


@dataclass
class Done:
    outputs: list               # torch.Tensor or OutputRef, one per output
    sample: Sample | None
    report: Report


def encode_outputs(outputs: list) -> list:
    return [{"ref": o.key, "dtype": o.dtype, "offset": o.offset, "shape": list(o.shape),
             "stride": list(o.stride)} if isinstance(o, OutputRef) else o for o in outputs]


def done_reply(outputs, sample: Sample | None, report: dict) -> dict:
    return {"kind": "done", "outputs": encode_outputs(outputs or []),
            "sample": None if sample is None else vars(sample), "report": report}


def failed_reply(status: str, reason: str, healthy: bool) -> dict:
    return {"kind": "failed", "status": status, "reason": reason, "healthy": healthy}


def _seconds(x) -> bool:
    return type(x) in (int, float) and 0 <= x < 1e6


def _ints(xs) -> bool:
    return isinstance(xs, list) and all(type(x) is int for x in xs)


def _output(item):
    if type(item) is torch.Tensor:
        return item
    if (isinstance(item, dict) and isinstance(item.get("ref"), str) and isinstance(item.get("dtype"), str)
            and type(item.get("offset")) is int and _ints(item.get("shape")) and _ints(item.get("stride"))
            and isinstance(getattr(torch, item["dtype"], None), torch.dtype)):
        return OutputRef(item["ref"], item["dtype"], item["offset"], tuple(item["shape"]), tuple(item["stride"]))
    return None


def _sample(raw) -> Sample | None:
    if not isinstance(raw, dict) or set(raw) != set(Sample.__dataclass_fields__):
        return None
    numbers = ("device_ms", "settle_ms", "host_ms", "gate_ms", "floor_ms", "sm_mhz", "drain_ms")
    if not all(type(raw[k]) in (int, float) and math.isfinite(raw[k]) and 0 <= raw[k] < 1e9 for k in numbers):
        return None
    if type(raw["held"]) is not bool or type(raw["misses"]) is not int:
        return None
    return Sample(**raw)


def _report(raw) -> Report:
    raw = raw if isinstance(raw, dict) else {}
    return Report([str(e)[:200] for e in list(raw.get("events") or [])[:10]],
                  [str(t)[:80] for t in list(raw.get("tampered") or [])[:10]])


def parse_reply(raw, *, outputs: bool, timed: bool):
    """``Ready``/``Done``/``Failure`` from a worker's raw reply; anything off is ``invalid``."""
    bad = Failure("invalid", "the worker's reply was malformed")
    if not isinstance(raw, dict):
        return bad
    kind = raw.get("kind")
    if kind == "ready":
        pid, setup_s, load = raw.get("pid"), raw.get("setup_s"), raw.get("load", {})
        if type(pid) is not int or not _seconds(setup_s) or not isinstance(load, dict) \
                or not all(k in LOAD_STEPS and _seconds(v) for k, v in load.items()):
            return bad
        return Ready(pid, float(setup_s), {k: float(v) for k, v in load.items()})
    if kind == "failed":
        status, reason = raw.get("status"), raw.get("reason")
        if status not in ("invalid", "error", "crash") or not isinstance(reason, str):
            return bad
        return Failure(status, reason[:400], raw.get("healthy") is True)
    if kind != "done" or not isinstance(raw.get("outputs"), list):
        return bad
    outs = [_output(o) for o in raw["outputs"]]
    if any(o is None for o in outs) or (outputs and not outs):
        return Failure("invalid", "the worker's reply held something other than output tensors")
    sample = _sample(raw.get("sample")) if timed else None
    if timed and sample is None:
        return Failure("invalid", "the worker's reply carried no valid timing sample")
    return Done(outs, sample, _report(raw.get("report")))


def _within(ref: OutputRef, itemsize: int, nbytes: int) -> bool:
    if len(ref.shape) != len(ref.stride) or ref.offset < 0 or min((*ref.shape, *ref.stride), default=0) < 0:
        return False
    if 0 in ref.shape:
        return True
    last = ref.offset + sum((n - 1) * st for n, st in zip(ref.shape, ref.stride))
    return (last + 1) * itemsize <= nbytes


def resolve(outputs: list, inputs: dict) -> tuple:
    """The outputs as tensors: a reference becomes the same view of the parent's own input.
    Raises ValueError for a reference to no input or outside its storage."""
    out = []
    for o in outputs:
        if not isinstance(o, OutputRef):
            out.append(o)
            continue
        base = inputs.get(o.key)
        if type(base) is not torch.Tensor:
            raise ValueError(f"an output refers to {o.key!r}, which is not an input tensor")
        dtype = getattr(torch, o.dtype)
        storage = base.untyped_storage()
        if not _within(o, dtype.itemsize, storage.nbytes()):
            # set_ would grow the parent's storage rather than refuse
            raise ValueError(f"an output's view of input {o.key!r} is out of bounds")
        view = torch.empty(0, dtype=dtype, device=base.device)
        view.set_(storage, o.offset, o.shape, o.stride)
        out.append(view)
    return tuple(out)


# -- channel -------------------------------------------------------------------------------
# The private channel between the trusted parent and a worker.
#
# Messages are pickled, and unpickling can run arbitrary code, so the parent reads the
# worker's replies with an unpickler that only rebuilds plain data and tensors: a
# submission that hijacks the worker still cannot run code in the parent.

_TORCH_REBUILDERS = {
    "rebuild_tensor", "rebuild_cuda_tensor", "rebuild_storage_fd", "rebuild_storage_filename",
    "rebuild_typed_storage", "rebuild_typed_storage_child", "rebuild_storage_empty",
    "rebuild_meta_tensor",
}
_ALLOWED = {
    ("multiprocessing.resource_sharer", "DupFd"),
    ("torch", "Size"), ("torch", "Tensor"), ("torch", "device"),
    ("torch", "UntypedStorage"), ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"), ("torch", "TypedStorage"),
}


class UnsafeReply(Exception):
    """The worker sent something other than plain data and tensors."""


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        allowed = (module, name) in _ALLOWED or (
            module == "torch.multiprocessing.reductions" and name in _TORCH_REBUILDERS)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            allowed = True
        if not allowed:
            raise UnsafeReply(f"worker reply holds a forbidden object {module}.{name}")
        return super().find_class(module, name)


def send(conn: Connection, message) -> None:
    """Send with torch's reductions (tensors travel as shared memory / CUDA IPC handles)."""
    conn.send_bytes(ForkingPickler.dumps(message))


def receive_trusted(conn: Connection):
    """Worker side: messages from the parent are trusted."""
    return pickle.loads(conn.recv_bytes())


MAX_REPLY_BYTES = 64 * 2**20  # tensors travel as handles; a real reply is far smaller


def _read_exact(fd: int, n: int, deadline: float) -> bytes:
    chunks, left = [], n
    while left:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            raise TimeoutError("the worker sent part of a message and stopped")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv_bytes(conn: Connection, deadline: float) -> bytes:
    """multiprocessing's framing (4-byte big-endian size, -1 then 8 bytes for huge ones), read
    with a deadline and a size limit: junk written to the channel cannot hang the parent."""
    fd = conn.fileno()
    size, = struct.unpack("!i", _read_exact(fd, 4, deadline))
    if size == -1:
        size, = struct.unpack("!Q", _read_exact(fd, 8, deadline))
    if size < 0 or size > MAX_REPLY_BYTES:
        raise UnsafeReply(f"worker wrote a malformed message to the channel (claimed {size} bytes)")
    return _read_exact(fd, size, deadline)


def receive_untrusted(conn: Connection, timeout: float = 60.0):
    """Parent side: rebuild only allow-listed globals; reject everything else."""
    try:
        data = _recv_bytes(conn, time.monotonic() + timeout)
    except TimeoutError as exc:
        raise UnsafeReply(str(exc)) from None
    try:
        return _SafeUnpickler(io.BytesIO(data)).load()
    except UnsafeReply:
        raise
    except Exception as exc:  # truncated or garbage bytes
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UnsafeReply(f"unreadable worker reply ({type(exc).__name__}: {first})") from exc


@dataclass(frozen=True)
class Sample:
    device_ms: float     # start to end event on the caller's stream
    settle_ms: float     # start event to an event recorded after the drain
    host_ms: float       # host time inside the call
    held: bool           # the whole call was enqueued before the device reached the start event
    gate_ms: float       # gate the call ran behind (0: none)
    misses: int          # earlier tries of this call discarded because the gate was too short
    floor_ms: float      # the drain of an empty call on this host
    sm_mhz: float = 0.0  # SM clock while the gate spun just before the call (0: no gate)
    drain_ms: float = 0.0  # host time of a device-wide synchronize once the end event completed


@dataclass(frozen=True)
class OutputRef:
    """An output that is a view of an input: (input key, dtype, offset, shape, stride)."""

    key: str
    dtype: str
    offset: int
    shape: tuple
    stride: tuple
