"""Exceptions shared by the parent and the worker side."""
from __future__ import annotations


class KbenchError(Exception):
    """A user-facing problem (bad path, unknown suite...): shown as one line, exit code 2."""


class ContractError(Exception):
    """A submission broke its task's contract (missing entry point, wrong return type...).

    Raised by worker-side contract code; the case gets status ``invalid``.
    """
