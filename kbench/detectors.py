"""Parent-side detectors: evidence in a case's samples and the worker's reports that the
figure cannot be trusted. The counterpart of tripwires.py, which runs in the worker.

Each flag fails the run, so each rests on evidence an honest kernel cannot produce
(tests/test_detectors.py and the honest corpus on the GPU show that it does not).
"""
from __future__ import annotations

from .protocol import Report
from .timing import Summary

# The device settling (all streams idle) later than the timed stream's end event, by more
# than an empty call's gap plus half the call and 0.1 ms, means work ran on a stream the
# caller never joined. Honest calls on the H100 host showed gaps of 49-65 us over the
# event time (torch.compile, Triton, several launches, CUDA graphs), above an empty
# call's: a 30 us slack flagged them. Unjoined work shorter than this goes unflagged.
HIDDEN_WORK_SHARE = 0.5
HIDDEN_WORK_SLACK_MS = 0.1
# A measured time this far under the case's physical floor (bytes / copy bandwidth, flops /
# matmul rate) is a bug or a cheat.
FLOOR_MARGIN = 0.9
# A case whose calls ran with the SM clock (read from the gate's spin just before each call)
# under this share of the card's maximum ran on a throttled card: at its power cap, hot, or
# clocked down by someone else's work. Not a flag: the kernel may be honest and the card busy.
# Measured on an H200 (docs/measurement.md): 1980 MHz at rest and under kbench's own calls, down
# to 1350 MHz at the power cap.
THROTTLE_SHARE = 0.9


def tripwire_flags(report: Report) -> list[str]:
    """What the worker's audit hook and identity watch saw."""
    flags = [f"submission {event}" for event in report.events]
    if report.tampered:
        flags.append(f"submission replaced {', '.join(report.tampered)}: timer or harness tampering")
    return flags


def hidden_work(device: Summary, settle: Summary, floor_ms: float = 0.0) -> str | None:
    """``floor_ms``: the settle gap of an empty call on this host (measured by the worker)."""
    excess = settle.median - device.median - floor_ms
    if excess > max(HIDDEN_WORK_SLACK_MS, HIDDEN_WORK_SHARE * device.median):
        return (f"the device settled after {settle.median:.4g} ms but the timed stream after "
                f"{device.median:.4g} ms: work hidden on another stream; latency taken as the former")
    return None


def is_throttled(mhz: float | None, max_mhz: float | None) -> bool:
    """``mhz``: a case's median SM clock; ``max_mhz``: the card's maximum (either None: unknown)."""
    return bool(mhz and max_mhz and mhz < THROTTLE_SHARE * max_mhz)


def throttled(label: str, mhz: float | None, max_mhz: float | None) -> str | None:
    """A note, not a flag, on a case whose ``label`` target ran on a throttled card."""
    if is_throttled(mhz, max_mhz):
        return (f"{label}'s calls ran at a {mhz:.0f} MHz SM clock, {100 * mhz / max_mhz:.0f}% of the "
                f"card's {max_mhz:.0f} MHz: the card was throttled (power, heat or other work), and "
                f"this time is not comparable with an unthrottled run")
    return None


def host_bound(records: list[dict]) -> str | None:
    """A note, not a flag, when a passed case's call takes longer to return on the host than it
    runs on the device: called back to back (no CUDA graph, no other work to hide behind), such a
    call goes at the host's pace, and a timer on the host's clock (as GPU MODE's and Paradigm's
    originals use) reads the host, not the kernel. kbench's figure is the device's either way."""
    timed = [r for r in records if r.get("host_ms") and r.get("latency_ms")]
    bound = [r for r in timed if r["host_ms"] > r["latency_ms"]]
    if not bound:
        return None
    worst = max(bound, key=lambda r: r["host_ms"] / r["latency_ms"])
    return (f"host-bound on {len(bound)} of {len(timed)} timed cases: the call takes longer to return "
            f"on the host than to run on the device (worst: {worst['case']}, {worst['host_ms'] * 1e3:.1f} "
            f"us on the host, {worst['latency_ms'] * 1e3:.1f} us on the device; per case: host us, "
            f"--wide). Back to back such calls go at the host's pace, and a host-clock timer reads the "
            f"host's time")


def below_floor(latency_ms: float | None, floor_ms: float | None) -> str | None:
    if latency_ms and floor_ms and latency_ms < FLOOR_MARGIN * floor_ms:
        return (f"faster than physically possible ({latency_ms:.4g} ms < floor {floor_ms:.4g} ms): "
                "a bug or a cheat")
    return None


def host_in_window(held: int, total: int) -> str | None:
    """Not a flag: calls that wait for the device themselves cannot be held behind the gate."""
    if total and held < total:
        return (f"{total - held} of {total} timed calls could not be enqueued ahead of the device "
                f"(the call synchronizes, or its host work outlasts the gate): their time includes "
                f"host time, as it would in real use")
    return None
