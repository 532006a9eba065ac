"""The worker protocol and the per-call timer on CPU: replies are validated field by field,
outputs that alias an input come back by reference, the live inputs keep their views, the
gate grows until a call is held and gives up on calls that wait for the device, and a
worker survives a Python exception."""
import pytest
import torch

from kbench import protocol
from kbench.protocol import OutputRef, Sample
from kbench.run.runner import Options, Runner
from kbench.run.targets import WorkerProcess
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from kbench.worker import timer as timer_mod
from kbench.worker.timer import CallTimer
from tests.helpers import FIXTURES

SAMPLE = {"device_ms": 1.0, "settle_ms": 1.1, "host_ms": 0.01, "held": True, "gate_ms": 0.5, "misses": 0,
          "floor_ms": 0.03, "sm_mhz": 1980.0}


def test_a_well_formed_timed_reply_parses():
    raw = {"kind": "done", "outputs": [torch.zeros(2)], "sample": SAMPLE, "report": {"events": ["x"]}}
    reply = protocol.parse_reply(raw, outputs=True, timed=True)
    assert isinstance(reply, protocol.Done) and reply.sample == Sample(**SAMPLE)
    assert reply.report.events == ["x"]


@pytest.mark.parametrize("raw", [
    None, ("ok", [], None), {"kind": "done", "outputs": [1.0], "sample": SAMPLE},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": dict(SAMPLE, device_ms=float("nan"))},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": dict(SAMPLE, device_ms=-1.0)},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": dict(SAMPLE, extra=1)},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": None},
    {"kind": "done", "outputs": [{"ref": "q", "dtype": "os.system", "offset": 0, "shape": [1], "stride": [1]}],
     "sample": SAMPLE},
    {"kind": "failed", "status": "passed", "reason": "all good"},
    {"kind": "ready", "pid": 1, "setup_s": 0.0, "load": {"device_s": -1.0}},
    {"kind": "ready", "pid": 1, "setup_s": 0.0, "load": {"os.system": 1.0}},
    {"kind": "ready", "pid": 1, "setup_s": 0.0, "load": [1.0]},
])
def test_malformed_replies_are_invalid(raw):
    reply = protocol.parse_reply(raw, outputs=True, timed=True)
    assert isinstance(reply, protocol.Failure) and reply.status == "invalid"


def test_an_output_reference_resolves_to_the_parents_own_tensor():
    kv = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    (view,) = protocol.resolve([OutputRef("kv", "float32", 4, (2, 4), (4, 1))], {"kv": kv})
    assert view.data_ptr() == kv[1:].data_ptr() and torch.equal(view, kv[1:])
    with pytest.raises(ValueError, match="out of bounds"):
        protocol.resolve([OutputRef("kv", "float32", 8, (2, 4), (4, 1))], {"kv": kv})
    with pytest.raises(ValueError, match="not an input tensor"):
        protocol.resolve([OutputRef("nope", "float32", 0, (1,), (1,))], {"kv": kv})


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


def test_a_worker_survives_a_python_exception_and_is_not_restarted(monkeypatch):
    starts = []
    real_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: (starts.append(1), real_start(self))[1])
    options = Options(suite="smoke", device="cpu", baseline="none", calibrate=False, warmup_ms=1.0,
                      stop=StopRule(min_samples=2, max_samples=2, budget_s=0.5))
    result = Runner(get_task("qknorm"), options).run(FIXTURES / "qknorm" / "fails_one_case")
    statuses = [c["status"] for c in result["cases"]]
    assert "error" in statuses and statuses.count("passed") == len(statuses) - 1
    assert len(starts) == 1


def test_a_ready_reply_carries_the_loads_steps():
    reply = protocol.parse_reply({"kind": "ready", "pid": 7, "setup_s": 0.5, "load": {"device_s": 1, "entry_s": 0.25}},
                                 outputs=False, timed=False)
    assert reply == protocol.Ready(7, 0.5, {"device_s": 1.0, "entry_s": 0.25})
    # a worker of an older kbench says nothing of its steps
    assert protocol.parse_reply({"kind": "ready", "pid": 7, "setup_s": 0.5}, outputs=False, timed=False).load == {}


def test_a_run_reports_each_targets_start_up_with_the_loads_steps():
    options = Options(suite="smoke", device="cpu", calibrate=False, warmup_ms=1.0, only=("b3_q5_kv2_d64_f16",),
                      stop=StopRule(min_samples=2, max_samples=2, budget_s=0.5))
    startup = Runner(get_task("qknorm"), options).run(FIXTURES / "honest" / "qknorm" / "triton_plain")["wall"]["startup"]
    for target in ("submission", "baseline"):
        steps = {k: startup[target][k] for k in protocol.LOAD_STEPS}
        assert all(0 <= v < startup[target]["ready_s"] for v in steps.values()), startup
        assert sum(steps.values()) <= startup[target]["ready_s"]


class _FakeEvents(CallTimer):
    """A CUDA timer without CUDA: the real `_once`, with events that report ``device_ms``."""

    def __init__(self, device_ms):
        super().__init__("cpu", 0)
        self.cuda, self.device_ms = True, device_ms
        self.sync = lambda: None
        self.spin = lambda cycles: None
        self.cycles_per_ms, self.settle_floor_ms = 1.0, 0.0
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


def test_a_workers_warm_up_starts_a_case():
    from kbench.worker.loop import Caller

    caller = Caller(None, "cpu", 0)
    caller.timer.primer, caller.timer.gate_off = ("stale",), True
    caller.timer.timed = lambda invoke, prepare, inputs, graph=False: ([], None)
    caller.warmup(protocol.Warmup({}, min_ms=0.0, max_calls=1))
    assert caller.timer.primer is None and not caller.timer.gate_off


def test_a_long_call_is_not_primed():
    seen = _calls_seen(_FakeEvents(device_ms=timer_mod.PRIMER_BELOW_MS), [1, 2, 3])
    assert seen == [1.0, 2.0, 3.0]


def test_a_first_call_that_compiles_does_not_use_up_the_warm_up():
    import time

    from kbench.worker.loop import Caller

    caller = Caller(None, "cpu", 0)
    calls = []

    def timed(invoke, prepare, inputs, graph=False):
        calls.append(time.perf_counter())
        time.sleep(0.05 if len(calls) == 1 else 0.001)   # the first call compiles
        return [], None

    caller.timer.timed = timed
    caller.warmup(protocol.Warmup({}, min_ms=20.0, max_calls=100))
    assert len(calls) > 5 and (calls[-1] - calls[1]) * 1e3 >= 15.0
