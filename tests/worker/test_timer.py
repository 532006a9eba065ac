"""The per-call timer on CPU (kbench/worker/timer.py): outputs that alias an input come back by
reference, the live inputs keep their views, the gate grows until a call is held and gives up on
calls that wait for the device, each call is primed and preceded by a model's other work, and the
drain counts work left on another stream, not a late host. On a CUDA device (GPU tests marked):
that other work on the card, never inside the timed window; the drain on real streams."""
import time

import pytest
import torch

from kbench.protocol import OutputRef, Sample
from kbench.run.card import flush_bytes
from kbench.worker import timer as timer_mod
from kbench.worker.timer import CallTimer


def test_live_inputs_keep_their_views_and_never_touch_the_parents_tensors():
    timer = CallTimer("cpu", 0)
    qkv = torch.randn(2, 7, 4)
    inputs = {"qkv": qkv, "q": qkv[:, :5], "k": qkv[:, 5:6], "n": 3}
    live, pairs = timer.stage(inputs)
    assert len(pairs) == 1 and live["n"] == 3
    assert live["q"].untyped_storage().data_ptr() == live["qkv"].untyped_storage().data_ptr()
    assert live["q"].untyped_storage().data_ptr() != qkv.untyped_storage().data_ptr()
    assert live["q"].stride() == inputs["q"].stride()
    timer.copy_in(pairs)
    assert torch.equal(live["k"], inputs["k"])
    live["k"].zero_()
    assert not torch.equal(qkv[:, 5:6], live["k"])      # the parent's copy is untouched ...
    timer.copy_back(pairs)
    assert torch.equal(qkv[:, 5:6], torch.zeros(2, 1, 4))  # ... until copied back after the call


def test_every_call_places_its_inputs_somewhere_new():
    timer = CallTimer("cpu", 0)
    x = torch.zeros(1024)
    addresses = {timer.stage({"x": x})[0]["x"].data_ptr() for _ in range(20)}
    assert len(addresses) >= 15   # 8192 possible shifts: an address-keyed cache rarely hits


def test_an_output_aliasing_an_input_comes_back_by_reference():
    timer = CallTimer("cpu", 0)
    cache = torch.zeros(4, 3)

    def append(args):
        args["cache"][2] = 7.0
        return args["cache"][1:], args["cache"].sum(0, keepdim=True)

    ref, fresh = timer.run(append, lambda x: x, {"cache": cache})
    assert ref == OutputRef("cache", "float32", 3, (3, 3), (3, 1))
    assert type(fresh) is torch.Tensor and torch.equal(fresh, torch.full((1, 3), 7.0))
    assert torch.equal(cache[2], torch.full((3,), 7.0))   # the update reached the parent's buffer


class _FakeGate(CallTimer):
    """A CUDA timer without CUDA: `_once` reports held only once the gate reaches ``needs``."""

    def __init__(self, needs_ms):
        super().__init__("cpu", 0)
        self.cuda, self.needs, self.tries = True, needs_ms, []
        self.sync = lambda: None

    def _once(self, invoke, prepare, inputs):
        self.tries.append(self.gate_ms)
        live, pairs = self.stage(inputs)
        held = not self.gate_off and self.gate_ms >= self.needs
        self.enqueue_ms = 0.05
        return invoke(live), live, pairs, Sample(1.0, 1.0, 0.0, held, self.gate_ms, 0, 0.0)


def test_the_gate_doubles_until_a_call_is_held_then_shrinks_back():
    timer = _FakeGate(needs_ms=1.5)
    _, sample = timer.timed(lambda a: (a["x"] + 1,), lambda x: x, {"x": torch.zeros(1)})
    assert timer.tries == [0.5, 1.0, 2.0] and sample.held and sample.misses == 2
    assert timer.gate_ms == pytest.approx(3 * 0.05 + 0.05)   # sized to what enqueueing took


def test_a_call_that_waits_for_the_device_drops_the_gate_and_says_so():
    timer = _FakeGate(needs_ms=float("inf"))
    _, sample = timer.timed(lambda a: (a["x"] + 1,), lambda x: x, {"x": torch.zeros(1)})
    assert timer.gate_off and not sample.held
    assert max(timer.tries) == timer_mod.MAX_GATE_MS


class _FakeEvents(CallTimer):
    """A CUDA timer without CUDA: the real `_once`, with events that report ``device_ms``."""

    def __init__(self, device_ms):
        super().__init__("cpu", 0)
        self.cuda, self.device_ms = True, device_ms
        self.sync = lambda: None
        self.spin = lambda cycles: None
        self.cycles_per_ms, self.drain_floor_ms = 1.0, 0.0
        self.wait = lambda event: None
        self.flush = lambda: None
        self.lead_in_buf = torch.empty(64)
        self.event = lambda enable_timing=True: object()
        self.record = lambda event: None
        self.query = lambda event: False        # every call held
        self.elapsed = lambda a, b: self.device_ms


def _calls_seen(timer, rounds):
    seen = []
    invoke = lambda args: (seen.append(float(args["x"][0])), (args["x"] * 2,))[1]
    for value in rounds:
        timer.timed(invoke, lambda live: live, {"x": torch.full((4,), float(value))})
    return seen


def test_a_short_call_is_primed_with_the_previous_calls_arguments_never_its_own():
    seen = _calls_seen(_FakeEvents(device_ms=0.01), [1, 2, 3])
    # The first call has nothing before it; each later one runs after the previous call's inputs.
    assert seen == [1.0, 1.0, 2.0, 2.0, 3.0]


def test_every_call_starts_after_a_models_other_work_that_follows_the_primer():
    # The primer leaves the device as the call's own previous call does; in a model other
    # kernels run between two calls. Both stay ahead of the gate: neither is timed.
    log = []
    timer = _FakeEvents(device_ms=0.01)
    timer._interlude = lambda: log.append("interlude")
    timer.spin = lambda cycles: log.append("gate")
    invoke = lambda args: (log.append(f"call {float(args['x'][0]):g}"), (args["x"] * 2,))[1]
    for value in (1, 2):
        timer.timed(invoke, lambda live: live, {"x": torch.full((4,), float(value))})
    assert log == ["interlude", "gate", "call 1", "call 1", "interlude", "gate", "call 2"]


def test_the_primer_prepares_the_previous_inputs_again_so_a_call_that_changes_them_can_repeat():
    # Like mla_decode: the call appends to its cache and advances the length; prepare resets it.
    timer = _FakeEvents(device_ms=0.01)
    calls = []

    def prepare(live):
        live["length"].zero_()
        return live

    def invoke(args):
        assert int(args["length"]) == 0, "called on inputs that were not prepared"
        args["length"] += 1
        calls.append(float(args["x"][0]))
        return (args["x"] * 2,)

    for value in (1, 2, 3):
        timer.timed(invoke, prepare, {"x": torch.full((4,), float(value)), "length": torch.zeros((), dtype=torch.long)})
    assert calls == [1.0, 1.0, 2.0, 2.0, 3.0]


def test_a_workers_bound_method_is_primed_though_each_access_makes_a_new_object():
    class Worker:
        def __init__(self):
            self.seen = []

        def invoke(self, args):
            self.seen.append(float(args["x"][0]))
            return (args["x"] * 2,)

    timer, worker = _FakeEvents(device_ms=0.01), Worker()
    for value in (1, 2):
        timer.timed(worker.invoke, lambda live: live, {"x": torch.full((4,), float(value))})
    assert worker.seen == [1.0, 1.0, 2.0]


def test_a_call_is_never_primed_with_another_functions_inputs():
    timer = _FakeEvents(device_ms=0.01)
    seen = []
    timer.timed(lambda a: (a["x"] + 1,), lambda live: live, {"x": torch.zeros(2)})
    timer.timed(lambda a: (seen.append(sorted(a)), (a["y"] + 1,))[1], lambda live: live, {"y": torch.zeros(2)})
    assert seen == [["y"]]


def test_a_new_case_is_never_primed_with_the_previous_cases_inputs():
    timer = _FakeEvents(device_ms=0.01)
    seen = _calls_seen(timer, [1, 2])
    timer.start_case()
    seen += _calls_seen(timer, [3])
    assert seen == [1.0, 1.0, 2.0, 3.0]


def test_a_new_case_gives_the_gate_another_chance():
    timer = _FakeGate(needs_ms=float("inf"))     # a call that waits for the device: gate dropped
    timer.timed(lambda a: (a["x"] + 1,), lambda x: x, {"x": torch.zeros(1)})
    assert timer.gate_off
    timer.needs = 0.0                            # the next case's calls can be held
    timer.start_case()
    _, sample = timer.timed(lambda a: (a["x"] + 1,), lambda x: x, {"x": torch.zeros(1)})
    assert sample.held and not timer.gate_off


def test_a_long_call_is_not_primed():
    seen = _calls_seen(_FakeEvents(device_ms=timer_mod.PRIMER_BELOW_MS), [1, 2, 3])
    assert seen == [1.0, 2.0, 3.0]


class _FakeClock:
    """The host's clock, advanced only by the fakes below: a timing test that cannot flake."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def spend(self, ms):
        self.now += ms / 1e3


@pytest.mark.parametrize("late_host_ms, busy_stream_ms, drain_ms", [
    (0.0, 0.0, 0.0),     # an honest call, the host on time
    (0.3, 0.0, 0.0),     # an honest call, the host 0.3 ms late to its end event: no drain
    (0.0, 2.0, 2.0),     # a side stream still busy 2 ms after the end event: all of it drains
    (0.5, 2.0, 1.5),     # the same, seen by a late host: what is left of it
])
def test_the_drain_is_what_a_synchronize_waits_for_once_the_call_has_ended(late_host_ms, busy_stream_ms, drain_ms):
    timer, clock = _FakeEvents(device_ms=0.01), _FakeClock()
    timer.clock = clock
    side_left = []

    def wait(event):   # the end event: the host sees it complete late_host_ms after the device did
        clock.spend(late_host_ms)
        side_left.append(max(0.0, busy_stream_ms - late_host_ms))

    def sync():        # a device-wide synchronize waits for the side stream's rest, once
        clock.spend(side_left.pop() if side_left else 0.0)

    timer.wait, timer.sync = wait, sync
    _, sample = timer.timed(lambda a: (a["x"] + 1,), lambda live: live, {"x": torch.zeros(2)})
    assert sample.drain_ms == pytest.approx(drain_ms)
    assert sample.floor_ms == timer.drain_floor_ms


@pytest.mark.gpu
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


@pytest.mark.gpu
def test_on_the_gpu_a_side_stream_left_busy_drains_and_a_late_host_does_not():
    timer = CallTimer("cuda", flush_bytes("cuda"))
    side = torch.cuda.Stream()

    def honest(args):
        return (args["x"] + 1,)

    def hides(args):   # the answer on the caller's stream, 2 ms of other work left on a side stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(int(2 * timer.cycles_per_ms))
        return (args["x"] + 1,)

    def drains(fn, calls=7):
        samples = [timer.timed(fn, lambda live: live, {"x": torch.ones(4, device="cuda")})[1]
                   for _ in range(calls)]
        return sorted(s.drain_ms for s in samples)[calls // 2], samples

    honest_ms, _ = drains(honest)
    hidden_ms, _ = drains(hides)
    assert honest_ms < timer.drain_floor_ms + 0.1 < 1.0 < hidden_ms, (honest_ms, timer.drain_floor_ms, hidden_ms)
    wait = timer.wait   # a host that sees the end event 1 ms late: the settle event counts it, the drain not
    timer.wait = lambda event: (wait(event), time.sleep(1e-3))
    late_ms, samples = drains(honest)
    assert late_ms < timer.drain_floor_ms + 0.1, late_ms
    assert min(s.settle_ms - s.device_ms for s in samples) > 0.9
