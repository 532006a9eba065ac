"""Parent-side detectors: each flag fires on the evidence it names and not on what an honest
kernel produces (the honest corpus on the GPU, tests/test_honest_gpu.py, checks the rest)."""
from kbench import detectors
from kbench.protocol import Report
from kbench.timing import summarize


def test_work_left_on_another_stream_is_flagged_and_an_honest_settle_gap_is_not():
    device = summarize([0.008] * 20)
    honest = summarize([0.008 + 0.058] * 20)   # seen on the H100: the host's reaction to the sync
    hidden = summarize([2.0] * 20)             # a side stream still busy for 2 ms
    assert detectors.hidden_work(device, honest, floor_ms=0.052) is None
    assert "work hidden on another stream" in detectors.hidden_work(device, hidden, floor_ms=0.052)
    assert "work hidden" in detectors.hidden_work(device, summarize([0.008 + 0.052 + 0.2] * 20), 0.052)
    honest_worst = summarize([0.05216 + 0.0654] * 20)  # torch.compile on the H100, empty-call floor unknown
    assert detectors.hidden_work(summarize([0.05216] * 20), honest_worst, 0.0) is None


def test_below_the_physical_floor_is_flagged_only_below_it():
    assert detectors.below_floor(0.95, 1.0) is None
    assert "faster than physically possible" in detectors.below_floor(0.5, 1.0)
    assert detectors.below_floor(0.5, None) is None


def test_calls_that_were_not_held_give_a_note_not_a_flag():
    assert detectors.host_in_window(10, 10) is None
    assert "3 of 10 timed calls" in detectors.host_in_window(7, 10)


def test_tripwire_reports_become_flags():
    flags = detectors.tripwire_flags(Report(["read /etc/passwd, outside its folder"], ["time.perf_counter"]))
    assert flags[0] == "submission read /etc/passwd, outside its folder"
    assert "replaced time.perf_counter" in flags[1]
    assert detectors.tripwire_flags(Report()) == []
