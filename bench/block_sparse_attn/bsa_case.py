"""block_sparse_attn: a case's seed inputs as the Gluon kernel's launch arguments, for the scripts
here that launch the kernel directly (bsa_bitwise.py, bsa_timeline.py). Not run on its own."""
from __future__ import annotations

import math

QK_SCALE = 1.4426950408889634 / math.sqrt(128)  # the submission's QK_SCALE: scores in log2 units, head dim 128


def find_case(task, name: str):
    """The case called `name` in any of the task's suites."""
    return next(c for suite in task.suites.values() for c in suite.cases if c.name == name)


def kernel_inputs(task, case, device: str = "cuda") -> tuple:
    """(q, k, v, row_ptr, col_idx, seq_lens) of the case's seed inputs."""
    x = task.module.generate(dict(case.params, seed=case.seed), device)
    return tuple(x[n] for n in ("q", "k", "v", "row_ptr", "col_idx", "seq_lens"))
