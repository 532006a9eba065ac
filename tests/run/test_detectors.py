"""Parent-side detectors: each flag fires on the evidence it names and not on what an honest
kernel produces (the honest corpus on the GPU, tests/corpora/test_honest.py, checks the rest)."""
from kbench.protocol import Report
from kbench.run import records as records_mod
from kbench.stats.estimates import summarize


def test_work_left_on_another_stream_is_flagged_and_an_honest_drain_is_not():
    device = summarize([0.008] * 20)
    settle = summarize([0.3] * 20)             # its device time: a host late to the end event reads here too
    honest = summarize([0.004] * 20)           # a synchronize with nothing left to wait for
    hidden = summarize([2.0] * 20)             # a side stream still busy for 2 ms
    assert records_mod.hidden_work(device, honest, settle, floor_ms=0.003) is None
    flag = records_mod.hidden_work(device, hidden, settle, floor_ms=0.003)
    assert "work hidden on another stream" in flag and "settled after 0.3 ms" in flag
    assert "waited 2 ms once the call had ended, 0.003 ms after an empty call" in flag
    # The slack: 0.1 ms over the floor for a short call, half the call for a long one.
    assert records_mod.hidden_work(device, summarize([0.003 + 0.09] * 20), settle, 0.003) is None
    assert "work hidden" in records_mod.hidden_work(device, summarize([0.003 + 0.11] * 20), settle, 0.003)
    long_call = summarize([1.0] * 20)
    assert records_mod.hidden_work(long_call, summarize([0.003 + 0.45] * 20), settle, 0.003) is None
    assert "work hidden" in records_mod.hidden_work(long_call, summarize([0.003 + 0.55] * 20), settle, 0.003)


def test_the_hidden_work_flag_reads_the_median_drain_not_one_slow_synchronize():
    device, settle = summarize([0.008] * 21), summarize([0.07] * 21)
    drains = [0.004] * 18 + [5.0] * 3         # a few calls where the host was descheduled mid-synchronize
    assert records_mod.hidden_work(device, summarize(drains), settle, 0.003) is None
    assert "work hidden" in records_mod.hidden_work(device, summarize([0.004] * 9 + [5.0] * 12), settle, 0.003)


def test_below_the_physical_floor_is_flagged_only_below_it():
    assert records_mod.below_floor(0.95, 1.0) is None
    assert "faster than physically possible" in records_mod.below_floor(0.5, 1.0)
    assert records_mod.below_floor(0.5, None) is None


def test_calls_that_were_not_held_give_a_note_not_a_flag():
    assert records_mod.host_in_window(10, 10) is None
    assert "3 of 10 timed calls" in records_mod.host_in_window(7, 10)


def test_a_case_on_a_throttled_card_gets_a_note_and_an_unthrottled_or_unknown_one_none():
    assert records_mod.throttled("the submission", 1980.0, 1980.0) is None
    assert records_mod.throttled("the submission", 1800.0, 1980.0) is None   # 91%: within the margin
    note = records_mod.throttled("the submission", 1350.0, 1980.0)          # an H200 at its power cap
    assert "1350 MHz" in note and "68%" in note and "throttled" in note
    assert records_mod.throttled("the submission", None, 1980.0) is None    # CPU mode, or no gate
    assert records_mod.throttled("the submission", 1350.0, None) is None    # no nvidia-smi reading


def test_run_record_notes_the_throttled_target_of_a_case_from_the_cards_maximum_clock():
    from kbench.run.records import note_throttling
    from kbench.stats.estimates import max_sm_clock

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
    flags = records_mod.tripwire_flags(Report(["read /etc/passwd, outside its folder"], ["time.perf_counter"]))
    assert flags[0] == "submission read /etc/passwd, outside its folder"
    assert "replaced time.perf_counter" in flags[1]
    assert records_mod.tripwire_flags(Report()) == []


def test_a_call_that_returns_later_on_the_host_than_it_runs_on_the_device_is_noted_host_bound():
    def case(name, host_us, device_us):
        return {"case": name, "host_ms": host_us and host_us / 1e3, "latency_ms": device_us and device_us / 1e3}

    assert records_mod.host_bound([case("a", 40, 50), case("b", 10, 200)]) is None
    assert records_mod.host_bound([case("failed", None, None)]) is None
    note = records_mod.host_bound([case("a", 60, 50), case("b", 10, 200), case("c", 58, 4.2)])
    assert note.startswith("host-bound on 2 of 3 timed cases")
    assert "worst: c, 58.0 us on the host, 4.2 us on the device" in note


def test_a_run_record_notes_a_host_bound_run_on_the_gpu_but_not_in_cuda_graph_or_cpu_mode():
    from kbench.run.records import case_record, run_record
    from kbench.run.runner import Options
    from kbench.stats.estimates import summarize
    from kbench.tasks.task import get_task

    task = get_task("qknorm")
    suite = task.suite("quick")
    records = lambda: [case_record(c, "passed", "", latency=summarize([0.004, 0.005, 0.006]),  # noqa: E731
                                   host=summarize([0.03])) for c in suite.cases]

    def notes(**options):
        run = run_record(task, suite, Options(**options), "sub", {"device": options["device"]}, records(), [], None)
        return [n for n in run["notes"] if n.startswith("host-bound")]

    assert len(notes(device="cuda")) == 1 and f"of {len(suite.cases)} timed cases" in notes(device="cuda")[0]
    assert notes(device="cuda", cuda_graph=True) == []   # host_ms is then the capture, not a call
    assert notes(device="cpu") == []
