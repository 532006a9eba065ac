"""``utils`` as an original GPU MODE submission imports it (the helpers that make sense in a worker)."""
from __future__ import annotations

import random

import numpy as np
import torch


def set_seed(seed: int = 42):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def get_device(use_cuda: bool = True) -> torch.device:
    return torch.device("cuda" if use_cuda and torch.cuda.is_available() else "cpu")


def clear_l2_cache():
    """Write a buffer larger than the L2 (kbench flushes it itself between timed calls)."""
    if torch.cuda.is_available():
        torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda").fill_(1)


def verbose_allclose(received, expected, rtol=1e-05, atol=1e-08, max_print=5):
    """Mismatch descriptions, as in the original (empty list when close)."""
    if received.shape != expected.shape:
        return ["SIZE MISMATCH"]
    diff = torch.abs(received.float() - expected.float())
    bad = diff > atol + rtol * torch.abs(expected.float())
    n = int(bad.sum())
    if n == 0:
        return []
    idx = bad.nonzero()[:max_print]
    return [f"Number of mismatched elements: {n}"] + [
        f"ERROR at {tuple(i.tolist())}: {received[tuple(i)].item()} {expected[tuple(i)].item()}" for i in idx]


def make_match_reference(reference, **kwargs):
    def check(data, output):
        raise RuntimeError("kbench checks outputs in its own process")
    return check
