"""The card a run is timed on: what it is, its L2 and flush size, its measured copy and matmul ceilings."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def flush_bytes(device: str) -> int:
    """At least twice the L2 (sized from the device), and at least do_bench's 256 MB, so the
    host has as long as under the original challenges' timer to enqueue a call."""
    if device != "cuda":
        return 0
    return max(2 * l2_bytes(), 256 * 2**20)


def _event_ms(fn, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def measure_copy_gbps(nbytes: int = 2**30, trials: int = 5) -> tuple[float, float]:
    """Device-to-device copy, counting bytes read plus written: (best, spread). Each trial is the
    best of 10 copies; the spread is (best - worst trial) / best, in percent."""
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    rates = [2 * nbytes / (min(_event_ms(lambda: dst.copy_(src), 10)) * 1e-3) / 1e9 for _ in range(trials)]
    return max(rates), 100 * (max(rates) - min(rates)) / max(rates)


def measure_matmul_tflops(n: int = 8192, trials: int = 5, warmup_s: float = 0.2) -> tuple[float, float]:
    """bf16 n x n x n product on random data, after ``warmup_s`` of products (the clocks settle):
    (best, spread). Each trial is the median of 10 products; the spread is (best - worst trial) /
    best, in percent."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    spent = 0.0
    while spent < warmup_s * 1e3:
        spent += sum(_event_ms(lambda: a @ b, 10))
    rates = [2 * n**3 / (sorted(_event_ms(lambda: a @ b, 10))[5] * 1e-3) / 1e12 for _ in range(trials)]
    return max(rates), 100 * (max(rates) - min(rates)) / max(rates)


# The ceilings are read once per card, driver, clocks and power limit, thoroughly (FIRST_TRIALS),
# and kept (KBENCH_CACHE_DIR, else ~/.cache/kbench): one run that read its copy bandwidth 11% low
# (a busy or slow moment) gave every roofline ratio of that run 11% off, and on one H100 the bf16
# matmul rate read 679-780 TFLOP/s over twenty runs (a card at its power cap); a ceiling that
# followed them moved every roofline ratio with it. Each later run reads again (CHECK_TRIALS),
# records its reading beside the kept one (the card's last KEEP_READINGS are kept too) and says
# so when it is further from it than the card's readings scatter (AGREE_PCT: a copy read within
# 0.6% over twenty H100 runs, the matmul rate within 15%); the kept ceiling is used. Delete the
# file to read the card again.
FIRST_TRIALS, CHECK_TRIALS = 15, 5
KEEP_READINGS = 20
AGREE_PCT = {"copy_gbps": 3.0, "matmul_bf16_tflops": 15.0}
# The spec sheet's peaks (dense bf16): a measured ceiling above its card's is a wrong measurement.
SPEC = {"H100 80GB HBM3": {"copy_gbps": 3350.0, "matmul_bf16_tflops": 989.4},
        "H100 PCIe": {"copy_gbps": 2000.0, "matmul_bf16_tflops": 756.0},
        "H200": {"copy_gbps": 4800.0, "matmul_bf16_tflops": 989.4}}


def _cache_path() -> Path:
    root = os.environ.get("KBENCH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kbench")
    return Path(root) / "ceilings.json"


def _spec(name: str) -> dict | None:
    return next((v for k, v in SPEC.items() if k in name), None)


def kept_ceilings(key: str, fresh: dict[str, tuple[float, float]], spec: dict | None,
                  path: Path | None = None) -> tuple[dict, list[str]]:
    """The ceilings to use for card ``key`` given this run's ``fresh`` (value, spread) readings,
    the kept ones updated as the rule above says, and the notes to say."""
    path = path or _cache_path()
    cache = _read_cache(path)
    entry = cache.get(key) if isinstance(cache.get(key), dict) else {}
    out, notes = {}, []
    for name, (value, spread) in fresh.items():
        unit = "GB/s" if name == "copy_gbps" else "TFLOP/s"
        what = "copy bandwidth" if name == "copy_gbps" else "bf16 matmul rate"
        if spec and value > spec[name] * 1.02:
            notes.append(f"the {what} read {value:.1f} {unit}, above the spec sheet's {spec[name]:g}: "
                         f"a wrong measurement, not used")
            value = None
        kept = entry.get(name)
        if not (isinstance(kept, dict) and isinstance(kept.get("value"), (int, float)) and kept["value"] > 0):
            kept = None   # none yet, or a cache written by hand
        if value is not None and kept is None:
            kept = {"value": round(value, 1), "spread_pct": round(spread, 2), "readings": [round(value, 1)]}
        elif kept is not None and value is not None:
            readings = kept["readings"] if isinstance(kept.get("readings"), list) else [kept["value"]]
            readings = (readings + [round(value, 1)])[-KEEP_READINGS:]
            kept = {**kept, "readings": readings}
            off = value / kept["value"] - 1
            if abs(off) > AGREE_PCT[name] / 100:
                why = "busy or throttled?" if off < 0 else f"delete {path} to read the card again"
                notes.append(f"the {what} read {value:.1f} {unit} in this run, {100 * abs(off):.1f}% "
                             f"{'under' if off < 0 else 'over'} the {kept['value']:g} kept for this card ({why}): "
                             f"rooflines use {kept['value']:g}")
        if kept is not None:
            entry[name] = kept
            out[name] = kept["value"]
            out[f"{name}_spread_pct"] = kept.get("spread_pct")
            out[f"{name}_this_run"] = None if value is None else round(value, 1)
    if entry:
        cache[key] = entry
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache, indent=1))
            tmp.replace(path)
        except OSError:
            pass   # no cache: this run's own figures stand
    return out, notes


def _read_cache(path: Path) -> dict:
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _nvidia_smi() -> dict:
    fields = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")] if out.strip() else []
    return dict(zip(fields.split(","), values))


def calibrate(device: str, measure: bool = True) -> dict:
    """What the card is and, with ``measure``, what it can do (copy bandwidth, matmul rate),
    recorded with every result."""
    if device != "cuda":
        import platform

        return {"device": "cpu", "name": platform.processor() or platform.machine(),
                "torch": torch.__version__}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {
        "device": "cuda", "name": props.name, "sm_count": props.multi_processor_count,
        "l2_bytes": l2_bytes(), "memory_bytes": props.total_memory,
        "torch": torch.__version__, "cuda": torch.version.cuda,
    }
    info.update({k.replace(".", "_"): v for k, v in _nvidia_smi().items()})
    if measure:
        key = " | ".join(str(info.get(k)) for k in ("name", "driver_version", "clocks_max_sm", "power_limit"))
        trials = CHECK_TRIALS if key in _read_cache(_cache_path()) else FIRST_TRIALS
        fresh = {"copy_gbps": measure_copy_gbps(trials=trials),
                 "matmul_bf16_tflops": measure_matmul_tflops(trials=trials)}
        ceilings, notes = kept_ceilings(key, fresh, _spec(props.name))
        info.update(ceilings)
        if notes:
            info["notes"] = notes
    torch.cuda.empty_cache()
    return info
