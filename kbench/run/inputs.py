"""The cases' first inputs drawn on the host ahead of time, by one background thread.

A task whose `generate` draws its values on the host (block_sparse_attn: the original's CPU
generator, about a second per full-size case) declares `generate_host`; the runner then
draws case i+1's inputs while case i is timed (the parent mostly waits on the workers then)
and moves them to the device itself when the case starts, so nothing but the draw runs
beside a timed call: no copy to the device, no kernel. Same values as `generate`.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch

AHEAD = 1   # cases drawn ahead of the one running: host memory for one more input set


class HostInputs:
    def __init__(self, draw: Callable[[dict], dict], cases: list[tuple[str, dict]]):
        """``cases``: (name, parameters) in the order the run takes them."""
        self._draw = draw
        self._order = {name: i for i, (name, _) in enumerate(cases)}
        self._params = [params for _, params in cases]
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbench-inputs")
        self._futures: dict[int, Future] = {}
        for i in range(min(AHEAD + 1, len(cases))):
            self._submit(i)

    def _submit(self, i: int) -> None:
        if i < len(self._params) and i not in self._futures:
            self._futures[i] = self._pool.submit(self._draw, dict(self._params[i]))

    def take(self, name: str, device: str) -> dict:
        """The case's inputs on ``device`` (drawn now if they were not drawn ahead); starts the
        draw of the case AHEAD after it. A draw's exception is raised here, as `generate`'s."""
        i = self._order[name]
        self._submit(i)
        future = self._futures.pop(i)
        for stale in [j for j in self._futures if j < i]:   # cases skipped
            self._futures.pop(stale).cancel()
        self._submit(i + AHEAD)
        inputs = future.result()
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}

    def close(self) -> None:
        """Drop what was drawn ahead; a draw under way finishes on its own thread."""
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
