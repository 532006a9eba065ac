"""The parent-worker protocol (kbench/protocol.py): replies are validated field by field, an
output reference resolves to the parent's own tensor, and a ready reply carries the load's steps."""
import pytest
import torch

from kbench import protocol
from kbench.protocol import OutputRef, Sample
from kbench.run.runner import Options, Runner
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES

SAMPLE = {"device_ms": 1.0, "settle_ms": 1.1, "host_ms": 0.01, "held": True, "gate_ms": 0.5, "misses": 0,
          "floor_ms": 0.003, "sm_mhz": 1980.0, "drain_ms": 0.004}


def test_a_well_formed_timed_reply_parses():
    raw = {"kind": "done", "outputs": [torch.zeros(2)], "sample": SAMPLE, "report": {"events": ["x"]}}
    reply = protocol.parse_reply(raw, outputs=True, timed=True)
    assert isinstance(reply, protocol.Done) and reply.sample == Sample(**SAMPLE)
    assert reply.report.events == ["x"]


@pytest.mark.parametrize("raw", [
    None, ("ok", [], None), {"kind": "done", "outputs": [1.0], "sample": SAMPLE},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": dict(SAMPLE, device_ms=float("nan"))},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": dict(SAMPLE, device_ms=-1.0)},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": dict(SAMPLE, drain_ms=float("inf"))},
    {"kind": "done", "outputs": [torch.zeros(1)], "sample": {k: v for k, v in SAMPLE.items() if k != "drain_ms"}},
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
