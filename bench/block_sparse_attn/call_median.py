"""The median time of one function's calls under kbench's own protocol (kbench.worker.timer.CallTimer:
the gate, the L2 flush, one call timed by CUDA events), for bsa_precision_sweep.py, which times calls in
its own process rather than through `kbench eval`. Not run on its own; submissions/mla_decode/dev has the
same code."""
from __future__ import annotations

WARMUP = 2  # calls timed and dropped first: compilation, autotuning, caches


def median_ms(timer, fn, inputs: dict, calls: int, prepare=None) -> float:
    """The median device time (ms) of ``calls`` calls of ``fn(inputs)`` after WARMUP more;
    ``prepare`` (default: the same inputs every call) makes each call's inputs."""
    from kbench.stats.estimates import summarize
    from kbench.tasks.interface import same_inputs

    samples = [timer.timed(fn, prepare or same_inputs, inputs)[1].device_ms for _ in range(calls + WARMUP)]
    return summarize(samples[WARMUP:]).median
