"""The interlude on the card (CUDA only, skipped without one): a model's other work replayed
before every timed call, never inside the timed window."""
import pytest
import torch

from kbench.run.card import flush_bytes
from kbench.worker.timer import CallTimer

pytestmark = pytest.mark.gpu


def test_the_interlude_runs_before_every_call_and_is_never_timed():
    timer = CallTimer("cuda", flush_bytes("cuda"))
    replay, replays = timer.interlude.replay, []
    timer.interlude.replay = lambda: (replays.append(1), replay())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    replay()
    end.record()
    torch.cuda.synchronize()
    alone_ms = start.elapsed_time(end)
    samples = [timer.timed(lambda args: (args["x"] + 1,), lambda live: live,
                           {"x": torch.ones(4, device="cuda")})[1] for _ in range(5)]
    assert len(replays) == 5 + sum(s.misses for s in samples)   # a call tried again runs it again
    assert torch.isfinite(timer.interlude.out).all()
    # A one-element add is a few microseconds; the layer is tens of them.
    assert max(s.device_ms for s in samples) < alone_ms / 2, (alone_ms, [s.device_ms for s in samples])
