"""The private channel between the trusted parent and a worker.

Messages are pickled, and unpickling can run arbitrary code, so the parent reads the
worker's replies with an unpickler that only rebuilds plain data and tensors: a
submission that hijacks the worker still cannot run code in the parent.
"""
from __future__ import annotations

import io
import os
import pickle
import select
import struct
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

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
