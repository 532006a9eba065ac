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


def test_a_case_on_a_throttled_card_gets_a_note_and_an_unthrottled_or_unknown_one_none():
    assert detectors.throttled("the submission", 1980.0, 1980.0) is None
    assert detectors.throttled("the submission", 1800.0, 1980.0) is None   # 91%: within the margin
    note = detectors.throttled("the submission", 1350.0, 1980.0)          # an H200 at its power cap
    assert "1350 MHz" in note and "68%" in note and "throttled" in note
    assert detectors.throttled("the submission", None, 1980.0) is None    # CPU mode, or no gate
    assert detectors.throttled("the submission", 1350.0, None) is None    # no nvidia-smi reading


def test_run_record_notes_the_throttled_target_of_a_case_from_the_cards_maximum_clock():
    from kbench.records import max_sm_clock, note_throttling

    assert max_sm_clock({"clocks_max_sm": "1980 MHz"}) == 1980.0
    assert max_sm_clock({"clocks_max_sm": "[N/A]"}) is None and max_sm_clock({}) is None
    rec = {"baseline": "flashinfer", "sm_clock_mhz": 1975, "baseline_sm_clock_mhz": 1400, "notes": []}
    note_throttling(rec, {"clocks_max_sm": "1980 MHz"})
    assert len(rec["notes"]) == 1 and rec["notes"][0].startswith("baseline flashinfer's calls ran at a 1400 MHz")
    note_throttling(rec, {"clocks_max_sm": "1980 MHz"})   # once only
    assert len(rec["notes"]) == 1
    cpu = {"baseline": None, "sm_clock_mhz": None, "baseline_sm_clock_mhz": None, "notes": []}
    note_throttling(cpu, {"device": "cpu"})
    assert cpu["notes"] == []


def test_tripwire_reports_become_flags():
    flags = detectors.tripwire_flags(Report(["read /etc/passwd, outside its folder"], ["time.perf_counter"]))
    assert flags[0] == "submission read /etc/passwd, outside its folder"
    assert "replaced time.perf_counter" in flags[1]
    assert detectors.tripwire_flags(Report()) == []
