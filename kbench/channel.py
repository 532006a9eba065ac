"""The private channel between the trusted parent and a worker.

Messages are pickled, and unpickling can run arbitrary code, so the parent reads the
worker's replies with an unpickler that only rebuilds plain data and tensors: a
submission that hijacks the worker still cannot run code in the parent.
"""
from __future__ import annotations

import io
import pickle
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


def receive_untrusted(conn: Connection):
    """Parent side: rebuild only allow-listed globals; reject everything else."""
    data = conn.recv_bytes()
    try:
        return _SafeUnpickler(io.BytesIO(data)).load()
    except UnsafeReply:
        raise
    except Exception as exc:  # truncated or garbage bytes
        raise UnsafeReply(f"unreadable worker reply ({type(exc).__name__}: {exc})") from exc
