"""Runs a suite: inputs and ground truth in this (trusted) process, submissions in workers.

For each case: one checked call, a warm-up, then rounds of timed calls until the stop
rule is met. A round is one fresh input set, made here, and one timed call of each
target on it (baseline and submission alternate who goes first), each call its own
request: the worker never holds the inputs of a later call. Every timed output is
checked and the inputs are checked unchanged. docs/measurement.md has the reasons.
"""
from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kbench import protocol
from kbench.errors import KbenchError
from kbench.protocol import Failure
from kbench.run import card, workers
from kbench.run.inputs import HostInputs
from kbench.run.records import WorstError, case_record, hidden_work, host_in_window, run_record
from kbench.run.targets import Replicas, Target, changed_files, fingerprint
from kbench.stats import estimates
from kbench.stats.estimates import DEFAULT_PROCESSES, Series, median_clock
from kbench.tasks.check import CheckResult
from kbench.tasks.interface import TASK
from kbench.tasks.suites import Case, derive_seed
from kbench.tasks.task import Task, submission_file

# A submission that timed out on a case without ever answering a call probably hangs on every
# case: until it answers one, each later case's first call gets CUT_FACTOR times the reference's
# own time on that case (at least CUT_FLOOR_S) instead of the full --timeout. Once it answers,
# the cases cut short run again with the full timeout: a slow shape is told from a hang.
CUT_FLOOR_S = 3.0
CUT_FACTOR = 50.0


@dataclass
class Options:
    suite: str = "quick"
    device: str = "cuda"
    only: tuple[str, ...] | None = None
    baseline: str | None = None        # None = the best installed (Task.default_baseline); "none" = no baseline
    baseline_path: Path | None = None  # a submission timed in the baseline's place (kbench compare)
    timeout: float = 120.0             # seconds for any one request to a worker
    seed: int | None = None            # root seed: every case gets a hidden seed from it
    stop: estimates.StopRule = field(default_factory=estimates.StopRule)
    warmup_ms: float = 25.0
    cuda_graph: bool = False           # time CUDA-graph replays of each call (launch-bound kernels)
    # CUDA_DEVICE_MAX_CONNECTIONS in every worker (None: CUDA's default; the environment's is
    # dropped). Fewer connections start a context faster and serialize the streams (docs/scale-out.md).
    cuda_connections: int | None = None
    calibrate: bool = True
    processes: int | None = None       # worker processes per target and case (None: 2 on CUDA, 1 on CPU)
    # worker processes per target in all (None: the task's GPU_POOL on a GPU, else ``processes``)
    pool: int | None = None
    progress: object = None            # callable(str) for progress lines, or None
    on_case: object = None             # callable(record) as each case finishes (kbench/scaleout/plan.py streams them)
    # another run follows in this process (kbench eval of several submissions): once the first
    # case is done, as many workers as this run took start for it (workers.keep_warm)
    warm_next: bool = False

    @property
    def process_count(self) -> int:
        if self.processes is not None:
            return max(1, self.processes)
        return DEFAULT_PROCESSES if self.device == "cuda" else 1

    @property
    def pool_size(self) -> int:
        return max(self.pool or 1, self.process_count)


def task_options(task: Task, options: Options) -> Options:
    """``options`` with the task's defaults filled in: its ``GPU_POOL`` where ``--pool`` was not
    given and the run is on a GPU."""
    task_pool = TASK.get(task.module, "GPU_POOL")
    if options.pool is None and options.device == "cuda" and task_pool:
        return dataclasses.replace(options, pool=task_pool)
    return options


class Runner:
    def __init__(self, task: Task, options: Options):
        self.task = task
        self.module = task.module
        self.options = options = task_options(task, options)
        self.mutable = set(TASK.get(self.module, "MUTABLE_INPUTS"))
        # Timed calls' seeds come from a secret drawn per run, so a submission cannot compute
        # the timed inputs ahead from the public (or even the --seed) case seeds.
        self.nonce = secrets.randbits(62)
        self.notes: list[str] = []
        # Each case is timed in this many of a target's worker processes, the next case in the
        # next ones round its pool (docs/measurement.md, "Processes").
        self.processes = options.process_count
        stop = options.stop
        # At least three timed calls in every process of the case before a target may stop.
        self.stop = dataclasses.replace(stop, min_samples=min(max(stop.min_samples, 3 * self.processes),
                                                              stop.max_samples))
        self.host_inputs: HostInputs | None = None   # the cases' first inputs, drawn ahead (run)
        self.other_contexts: list[dict] = []   # made after the workers' own (kbench/run/workers.py)
        self.answered = False          # the submission has answered a call in this run
        self.hung_on: str | None = None   # the case it first timed out on, having answered none
        self.cut: list[str] = []       # cases whose first call got the cut deadline
        self.reference_s = 0.0         # the reference's time on the current case's first inputs

    def _say(self, text: str) -> None:
        if self.options.progress:
            self.options.progress(text)

    # -- inputs ---------------------------------------------------------------------
    def _params(self, case: Case, index: int = 0) -> dict:
        params = dict(case.params)
        base = case.seed if self.options.seed is None else derive_seed(self.options.seed, case.name)
        params["seed"] = base if index == 0 else derive_seed(base, self.nonce, "timed", index)
        return params

    def _make(self, case: Case, index: int):
        """Inputs, ground truth and a copy of every input the call must not change. Timed
        calls use the task's ``generate_timed`` where it has one (same distribution, made
        on the device: a heavy task's host generator would dominate the run); a first call
        takes what ``generate_host`` drew ahead, where the task has it."""
        timed = TASK.get(self.module, "generate_timed") if index else None
        if index == 0 and self.host_inputs is not None:
            inputs = self.host_inputs.take(case.name, self.options.device)
        elif timed is not None:
            inputs = timed(self._params(case), self.options.device, self._params(case, index)["seed"])
        else:
            inputs = self.module.generate(self._params(case, index), self.options.device)
        start = time.perf_counter()
        expected = self.module.reference(inputs)
        if index == 0:
            if self.options.device == "cuda":
                torch.cuda.synchronize()
            self.reference_s = time.perf_counter() - start
        pristine = {k: v.clone() for k, v in inputs.items()
                    if isinstance(v, torch.Tensor) and k not in self.mutable}
        return inputs, expected, pristine

    def _verdict(self, reply: protocol.Done, expected, inputs, pristine) -> CheckResult:
        try:
            outputs = protocol.resolve(reply.outputs, inputs)
        except ValueError as exc:
            return CheckResult("invalid", str(exc))
        for key, saved in pristine.items():
            if not torch.equal(inputs[key], saved):
                return CheckResult("invalid", f"the submission modified its input {key!r}")
        return self.module.check(outputs, tuple(expected), inputs)

    def _checked_call(self, target: Replicas, inputs, expected, pristine, timed: bool, what: str,
                      worst: WorstError | None = None, where: str = "", process: int = 0):
        """(sample, None) when the outputs pass (their errors go to ``worst``, at ``where``);
        (sample, CheckResult) when they do not; (None, Failure) when the call produced none."""
        reply = target.request(protocol.Call(inputs, timed, self.options.cuda_graph and timed), what, process)
        if isinstance(reply, Failure):
            return None, reply
        check = self._verdict(reply, expected, inputs, pristine)
        del reply.outputs[:]
        if check.passed and worst is not None:
            worst.add(check, where)
        return reply.sample, (None if check.passed else check)

    # -- one case ---------------------------------------------------------------------
    def run_case(self, case: Case, sub: Replicas, base: Replicas | None) -> dict:
        record = self._run_case(case, sub, base)
        record["flags"] += [f for f in sub.take_flags() if f not in record["flags"]]
        return record

    def _run_case(self, case: Case, sub: Replicas, base: Replicas | None) -> dict:
        pools = [t for t in (sub, base) if t is not None]   # kept: base may be dropped below, its workers live on
        failure = sub.ensure_running()
        if failure:
            return case_record(case, failure.status, failure.reason)
        inputs, expected, pristine = self._make(case, 0)
        deadline = self._first_call_deadline()
        reply = sub.request(protocol.Call(inputs, timed=False), "checking the first call", timeout=deadline)
        if isinstance(reply, Failure):
            return case_record(case, reply.status, self._first_call_failed(case, reply, deadline))
        self.answered = True
        verdict = self._verdict(reply, expected, inputs, pristine)
        del reply
        if not verdict.passed:
            return case_record(case, verdict.status, verdict.reason, verdict)
        worst = WorstError()
        worst.add(verdict, "first call")
        failure = sub.ensure_running(every=True)   # the other processes, loaded meanwhile
        if failure:
            return case_record(case, failure.status, failure.reason)
        base_failure = None
        base_status = None  # the baseline's Failure or CheckResult, when it did not pass
        # The baseline is waited for only once a submission passes a first call: a submission
        # that fails every case is rejected without paying for the baseline's start.
        if base is not None and base.ensure_running(every=True):
            note = f"baseline {base.label} unavailable: {base.load_failure.reason}"
            if note not in self.notes:
                self.notes.append(note)  # the case still runs, without a speedup
            base_status = base.load_failure
            base = None
        if base is not None:
            _, bad = self._checked_call(base, inputs, expected, pristine, False, "checking the baseline")
            if bad is not None:
                base_status = bad
                base_failure = f"baseline {base.label} {bad.status}: {bad.reason}"
                if base.strict or isinstance(bad, Failure):
                    base = None
                else:
                    base_failure += " (timed anyway: a trusted baseline's speed is still informative)"

        if self.options.device == "cuda":
            self._follow_contexts(case, pools)
        targets = [t for t in (base, sub) if t is not None]
        series = {id(t): Series() for t in targets}
        for target in targets:
            for process in range(len(target)):
                reply = target.request(protocol.Warmup(inputs, self.options.warmup_ms, 100, self.options.cuda_graph),
                                       "warming up", process)
                if isinstance(reply, Failure):
                    if target is sub:
                        return case_record(case, reply.status, f"warm-up: {reply.reason}")
                    series[id(target)].failed = Failure(reply.status, reply.reason)
                    break
        del inputs, expected, pristine

        failed = self._timed_rounds(case, targets, series, sub, worst)
        if failed is not None:
            return failed
        return self._finish(case, worst, sub, base, series, base_failure, base_status)

    def _first_call_deadline(self) -> float | None:
        """The cut deadline (s) while the submission hangs as far as the run has seen, else None."""
        if self.hung_on is None or self.answered:
            return None
        cut = max(CUT_FLOOR_S, CUT_FACTOR * self.reference_s)
        return cut if cut < self.options.timeout else None

    def _first_call_failed(self, case: Case, reply: Failure, deadline: float | None) -> str:
        if reply.status not in ("timeout", "crash"):
            self.answered = True   # it raised, or broke the contract: it answers, it does not hang
        if reply.status != "timeout" or self.answered:
            return reply.reason
        if deadline is None:
            self.hung_on = self.hung_on or case.name
            return reply.reason
        self.cut.append(case.name)
        return (f"{reply.reason} (cut: nothing answered since the timeout on {self.hung_on}; "
                f"{CUT_FACTOR:g}x the reference's {self.reference_s * 1e3:.2g} ms, at least {CUT_FLOOR_S:g} s)")

    def _follow_contexts(self, case: Case, pools: list[Replicas]) -> None:
        """Another CUDA context after every loaded worker's own, when one started since the last
        (kbench/run/workers.py); the run still goes on if it cannot be made, with a note."""
        try:
            made = workers.follow([m for pool in pools for m in pool.members],
                                        lambda: workers.make_and_exit(torch.cuda.current_device()))
        except workers.OtherContextError as exc:
            note = (f"another CUDA context could not be made before the timed calls ({exc}): a worker "
                    f"whose context was the GPU's last may read a few percent slow")
            if note not in self.notes:
                self.notes.append(note)
            return
        if made is not None:
            self.other_contexts.append({"before_case": case.name, **made})

    def _timed_rounds(self, case, targets, series, sub, worst: WorstError) -> dict | None:
        """Fresh inputs per round, one timed call per target on them, until every target's
        stop rule is met. Returns the submission's failure record, or None."""
        stop = self.stop
        start = time.perf_counter()
        index = 0
        while any(series[id(t)].active for t in targets):
            index += 1
            inputs, expected, pristine = self._make(case, index)
            # Round after round through the processes; who goes first flips each time round,
            # so drift and order effects hit both targets and every process.
            process = (index - 1) % self.processes
            order = targets if (index - 1) // self.processes % 2 == 0 else targets[::-1]
            for target in order:
                s = series[id(target)]
                if not s.active:
                    continue
                where = f"timed call {len(s.device) + 1} (seed {self._params(case, index)['seed']})"
                sample, bad = self._checked_call(target, inputs, expected, pristine, True, "timing",
                                                 worst if target is sub else None, where, process)
                if bad is None or not (isinstance(bad, Failure) or target.strict):
                    s.add(sample, process)  # a trusted baseline missing the tolerance is still timed
                    continue
                if isinstance(bad, Failure):
                    reason, check = f"timed call: {bad.reason}", None
                else:
                    seed = self._params(case, index)["seed"]
                    reason, check = f"timed call {len(s.device) + 1} (seed {seed}): {bad.reason}", bad
                if target is sub:
                    return case_record(case, bad.status, reason, check)
                s.failed = Failure(bad.status, reason)
            del inputs, expected, pristine
            elapsed = time.perf_counter() - start
            live = [series[id(t)] for t in targets if series[id(t)].active]
            for s, why in zip(live, stop.verdicts([s.device for s in live], elapsed)):
                s.done = why
        return None

    def _finish(self, case, worst, sub, base, series, base_failure, base_status) -> dict:
        sub_series = series[id(sub)]
        device, settle = estimates.summarize(sub_series.device), estimates.summarize(sub_series.settle)
        host = estimates.summarize(sub_series.host)
        timed = sub_series.device   # the figure's samples: the settle times where work was hidden
        pooled = sub_series.pooled(timed, self.processes)
        latency, flags, notes = pooled.summary, [], []
        if self.options.device == "cuda":
            hidden = hidden_work(device, estimates.summarize(sub_series.drain), settle,
                                 estimates.summarize(sub_series.floor).median)
            if hidden:
                flags.append(hidden)
                timed = sub_series.settle
                pooled = sub_series.pooled(timed, self.processes)
                latency = pooled.summary
            note = host_in_window(sub_series.held, len(sub_series.device))
            if note:
                notes.append(note)
        b = series.get(id(base)) if base is not None else None
        if b is not None and b.failed:
            base_failure, base_status = f"baseline {base.label} {b.failed.status}: {b.failed.reason}", b.failed
            b = None
        base_pooled = b.pooled(b.device, self.processes) if b is not None and b.device else None
        base_summary = base_pooled.summary if base_pooled else None
        record = case_record(case, "passed", "", worst.result(), latency=latency, host=host,
                             baseline=base.label if base_summary else None,
                             baseline_latency=base_summary, flags=flags, notes=notes,
                             baseline_failure=base_failure,
                             baseline_status=base_status or ("passed" if base_summary else None),
                             error_at=worst.at)
        # The gate each target's calls waited behind (median, ms): how long its host enqueue took.
        record["gate_ms"] = round(estimates.summarize(sub_series.gate).median, 3)
        # The SM clock just before each call (median, MHz; None: no call ran behind a gate):
        # kbench/run/records.py notes a case whose card was throttled.
        record["sm_clock_mhz"] = median_clock(sub_series.clock)
        # Each process's own median (ms): how far apart the processes were.
        record["latency_by_process_ms"] = [round(p.median, 6) for p in pooled.per_process]
        record["process_ids"] = sub.window   # which of the pool's processes, in that order
        # Every timed call (ms), per process in process_ids' order: the distribution (kbench plot).
        record["samples_ms"] = sub_series.by_process(timed, self.processes)
        if base_summary:
            record["baseline_gate_ms"] = round(estimates.summarize(b.gate).median, 3)
            # the baseline's host time inside the call (median, ms), as host_ms is the submission's
            record["baseline_host_ms"] = round(estimates.summarize(b.host).median, 6)
            record["baseline_sm_clock_mhz"] = median_clock(b.clock)
            record["baseline_by_process_ms"] = [round(p.median, 6) for p in base_pooled.per_process]
            record["baseline_process_ids"] = base.window
            record["baseline_samples_ms"] = b.by_process(b.device, self.processes)
        return record

    # -- the whole run ------------------------------------------------------------------
    def run(self, submission: Path) -> dict:
        options = self.options
        suite, cases = self.task.cases(options.suite, options.only, options.device)
        path = submission_file(self.task, submission)
        flush = card.flush_bytes(options.device)
        base = self._baseline_target(flush)
        sub = self._replicas(str(submission), path, flush)
        setup_cases = [self._params(c) for c in cases]
        draw = TASK.get(self.module, "generate_host")
        if draw is not None:   # from now on: the first case's inputs are drawn while the workers start
            self.host_inputs = HostInputs(draw, [(c.name, p) for c, p in zip(cases, setup_cases)])
        watched = [str(Path(__file__).resolve().parent.parent), str(self.task.code_dir), str(self.task.cases_path)]
        before = fingerprint(watched)
        began = time.perf_counter()
        try:
            for target in (sub, base):
                if target is not None:
                    target.start(setup_cases)
            sub.ready()
            records = []
            for i, case in enumerate(cases):
                self._say(f"[{i + 1}/{len(cases)}] {case.name}")
                records.append(self._case_at(i, case, sub, base))
                if options.on_case and case.name not in self.cut:
                    options.on_case(records[-1])
                if options.warm_next and i == 0:
                    workers.keep_warm(sum(len(t.members) for t in (sub, base) if t is not None))
            for i, case in enumerate(cases):   # a case cut short is kept only if nothing ever answered
                if case.name in self.cut:
                    if self.answered:
                        self._say(f"[again] {case.name}: the full timeout, as a later case was answered")
                        records[i] = self._case_at(i, case, sub, base)
                    if options.on_case:
                        options.on_case(records[i])
            fatal = None
            failure = sub.end_of_run("the end-of-run check")
            if failure is not None:
                fatal = f"{failure.status}: {failure.reason}"
        finally:
            if self.host_inputs is not None:
                self.host_inputs.close()
                self.host_inputs = None
            targets = [t for t in (sub, base) if t is not None]
            for target in targets:
                target.ask_to_stop()
            for target in targets:
                target.close()
        # After the cases, and only when a time will be reported: a submission that fails
        # every case is rejected without the card's calibration.
        measure = options.calibrate and any(r["status"] == "passed" for r in records)
        calibration = card.calibrate(options.device, measure=measure)
        changed = changed_files(before, fingerprint(watched))
        if changed:
            fatal = (f"kbench's files or the Python environment changed during the run "
                     f"({len(changed)}: {', '.join(changed[:3])}); reinstall before trusting any result")
        startup = {"submission": sub.startup, **({"baseline": base.startup} if base is not None else {})}
        return run_record(self.task, suite, options, str(submission), calibration, records, self.notes, fatal,
                          wall={"total_s": round(time.perf_counter() - began, 2), "startup": startup,
                                "other_contexts": self.other_contexts})

    def _case_at(self, i: int, case: Case, sub: Replicas, base: Replicas | None) -> dict:
        for target in (sub, base):
            if target is not None:
                target.begin_case(i)
        start = time.perf_counter()
        record = self.run_case(case, sub, base)
        record["wall_s"] = round(time.perf_counter() - start, 2)
        if self.options.device == "cuda":
            torch.cuda.empty_cache()
        return record

    def _baseline_target(self, flush: int) -> Replicas | None:
        if self.options.baseline == "none":
            return None
        if self.options.baseline_path is not None:  # kbench compare: another submission as "baseline"
            path = submission_file(self.task, self.options.baseline_path)
            return self._replicas(str(self.options.baseline_path), path, flush)
        available = self.task.baselines(self.options.device)
        if self.options.baseline is not None:
            name, known = self.options.baseline, ", ".join(TASK.get(self.module, "BASELINES")) or "none"
            if name not in TASK.get(self.module, "BASELINES"):
                raise KbenchError(f"unknown baseline {name!r} for {self.task.name} (known: {known})")
            if name not in available:
                raise KbenchError(f"baseline {name!r} cannot run on {self.options.device}")
            if self.task.missing(name):
                raise KbenchError(f"baseline {name!r} needs {', '.join(self.task.missing(name))}, "
                                  f"which is not installed here")
        else:
            name = self.task.default_baseline(self.options.device)
        return None if name is None else self._replicas(name, available[name], flush, strict=False)

    def _replicas(self, label: str, path: Path, flush: int, strict: bool = True) -> Replicas:
        return Replicas([Target(label, self.task, path, self.options, flush, strict)
                         for _ in range(self.options.pool_size)], self.processes)
