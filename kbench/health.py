"""Is a suite's check fair? The exact answer, rounded to the outputs' dtypes, must pass it.

A task may define ``exact(inputs)``: its reference's math in float64, not rounded. For a
case and a list of seeds, ``exact_answer_misses`` counts the seeds on which that answer,
rounded to each output's dtype, fails the task's own check against its ground truth. A
case where it ever fails is a broken case (the check rejects a perfect kernel), not a
strict one: at contexts of a few dozen rows mla_decode's bf16 ground truth was noisy
enough for that to happen on 0.5-1% of seeds.
"""
from __future__ import annotations

from .runner import derive_seed
from .suites import Case


def health_seeds(case: Case, n: int) -> list[int]:
    """``n`` seeds for a case, fixed (a test must not be flaky) and none of them the case's own."""
    return [derive_seed("suite-health", case.name, i) for i in range(n)]


def exact_answer_misses(module, case: Case, seeds: list[int], device: str = "cpu") -> tuple[int, str | None]:
    """(seeds on which the rounded exact answer fails the check, the first failure's reason)."""
    misses, first = 0, None
    for seed in seeds:
        inputs = module.generate(dict(case.params, seed=seed), device)
        expected = tuple(module.reference(inputs))
        rounded = tuple(e.to(r.dtype) for e, r in zip(module.exact(inputs), expected))
        result = module.check(rounded, expected, inputs)
        if not result.passed:
            misses += 1
            first = first or f"seed {seed}: {result.reason}"
    return misses, first
