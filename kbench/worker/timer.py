"""One call of a kernel, timed: the protocol the worker runs and bench/crosscheck.py repeats.

Per call on a CUDA device (docs/measurement.md has the reasons):

    live inputs allocated (new storages, same views,       host only
      each at a random shift of up to 4 MB)
    primer: the previous call again, on its own inputs     untimed; calls under 1 ms only
      prepared anew, outputs dropped
    interlude: a transformer layer without attention,      untimed
      replayed from a CUDA graph (kbench/worker/between_calls.py)
    gate: a spin kernel holds the stream (events around    |
      it: the SM clock, ``Sample.sm_mhz``)                 |
    live inputs copied in on the stream                    |  the host enqueues all of
    prepare(live)  (the contract's own set-up)             |  this while the gate holds;
    L2 flush: lines kept with evict_last released, then    |  none of it is timed
      a buffer >= 2x L2 filled with NaN, freed             |
    spacers of random size held (shift the outputs and     |
      temporaries, in both of the allocator's pools)       |
    lead-in: 0-8 tiny kernels (random count)               |
    start event; call(); end event                         |
    held = start has not run yet                           v
    wait for the end event; drain: a synchronize of all streams, timed on the host;
    settle event; synchronize

- The gate makes the event window the device's time whatever the host's speed:
  everything up to the end event is enqueued before the device reaches the start event.
  ``held`` checks that per call; a call enqueued too slowly is retried with a longer gate.
  A call that waits for the device itself (a synchronize inside) can never be held; after
  ``MAX_GATE_MS`` the gate is dropped and the figure includes that host time, as it does
  in real use (``Sample.held`` False says so).
- The inputs are written on the caller's stream after the gate, as the previous kernel
  of a real model would: work on a stream that does not wait on the caller's stream reads
  them before they exist and fails the check.
- Placement is randomized per call: a kernel of a few microseconds runs measurably faster
  or slower (5% seen on the H100) depending on where its buffers land, which is fixed
  within a process and differs between processes; over random shifts the median is the
  same in every process.
- The primer undoes what another process's work on the device costs the next call: in kbench
  the parent's checks and the other target's calls run between two calls of a worker, and on
  the H100 a call of a few microseconds ran 0.03-0.2 us slower right after another CUDA
  context's kernels than after its own (a plain process), and as fast as in a plain process
  once it had run once since (docs/measurement.md, "Primer"). It runs on the previous call's
  inputs, never on this call's: it cannot compute this call's answer ahead. Those inputs go
  through ``prepare`` again first, because a call may change its inputs (mla_decode appends a
  row to its cache and advances its length; a second call on the same arguments would write
  past the end of a full cache), and only the same function is primed (a bench script times
  several functions with one timer).
- The interlude puts a model's other work between the primer and the call, so a call never
  starts in the state its own previous call left: one kernel ran 9-12% faster in that state
  than after any other sizable kernel, and than inside a stack of transformer layers
  (kbench/worker/between_calls.py; docs/measurement.md, "What runs between calls").
- The lead-in puts the call behind short kernels, as a model's previous kernels would be,
  instead of directly behind the 80-us flush. On the H100, a call made of a few short
  launches (flashinfer's rmsnorm: two 2.5-us kernels) ran directly behind the flush at one
  of two speeds 1 us apart, fixed per process and case (7.1 or 8.1 us); behind a random
  0-8 tiny kernels it runs at the fast one in every process (docs/measurement.md).
- The drain looks for work the call left on a stream it never joined back: once the end event
  has completed, a device-wide synchronize waits for that work alone, so its host time is near
  an empty call's (``drain_floor_ms``) for an honest call however late the host is. The settle
  event, recorded after it, measured the same thing on the device clock, and there a host late
  to the end event reads as hidden work: an honest eager call once showed 0.22 ms of it.
- The submission never touches the parent's tensors: it gets fresh storages; afterwards
  they are copied back (so the parent sees in-place updates and can check the inputs
  unchanged) and an output that shares memory with an input is returned as a reference.
"""
from __future__ import annotations

import math
import random
import time

import torch

from kbench.protocol import OutputRef, Sample

MAX_SHIFT_BYTES = 4 << 20   # placement randomization: inputs and outputs move by up to 4 MB
# torch's caching allocator serves requests up to 1 MB from a separate pool of 2 MB segments:
# a second, small spacer moves a call's small outputs and temporaries there.
SMALL_POOL_BYTES = 1 << 20
MIN_GATE_MS = 0.1
MAX_GATE_MS = 20.0
MAX_TRIES = 8   # per timed call: a miss doubles the gate
# Lead-in: 0..LEAD_IN_MAX tiny kernels (random per call) between the flush and the start event.
LEAD_IN_MAX = 8
# The primer (the previous call again, untimed) runs before calls whose last device time was
# under this: what it removes is ~0.1-0.2 us, nothing beside a millisecond, and above that it
# would only double the device time of long calls.
PRIMER_BELOW_MS = 1.0


class CallTimer:
    """Times calls of one entry point. Every torch function it uses is bound at construction,
    before any submission is imported, so patching them later does not reach the timer."""

    def __init__(self, device: str, flush_bytes: int, shift: bool = True):
        self.device = device
        self.cuda = device == "cuda"
        self.flush_elems = flush_bytes // 4
        self.clock = time.perf_counter
        self.empty = torch.empty
        self.fill = torch.Tensor.fill_
        self.copy = torch.Tensor.copy_
        self.set_ = torch.Tensor.set_
        self.storage = torch.Tensor.untyped_storage
        self.clone = torch.Tensor.clone
        self.tensor_type = torch.Tensor
        self.flush = self._flush_l2   # bound now: patching the class later changes nothing
        self.random = random.Random()
        self.shift = shift
        self.pads: dict[int, int] = {}
        self.gate_ms = 0.5
        self.enqueue_ms = 0.0   # host time from the gate to the end event, last call
        self.gate_off = False   # set when the calls cannot be held (they wait for the device)
        self.primer = None      # (invoke, prepare, live inputs) of the last timed call, while its calls are short
        self.last_call = None
        self.interlude = None
        if self.cuda:
            self.sync = torch.cuda.synchronize
            self.event = torch.cuda.Event
            self.record = torch.cuda.Event.record
            self.query = torch.cuda.Event.query
            self.wait = torch.cuda.Event.synchronize
            self.elapsed = torch.cuda.Event.elapsed_time
            self.spin = torch.cuda._sleep
            from kbench.worker.between_calls import Interlude, release_persisting

            # Eviction priorities (and the persisting set-aside) came with Ampere; older cards have none to release.
            ampere = torch.cuda.get_device_capability(device)[0] >= 8
            self.release_persisting = release_persisting if ampere else (lambda buf: None)
            self.l2_elems = torch.cuda.get_device_properties(device).L2_cache_size // 4
            self.lead_in_buf = self.empty(64, device=device)
            self.interlude = Interlude(device)
            self._flush_l2()   # compiles release_persisting's kernels before any submission is imported
            self.cycles_per_ms = self._spin_rate()
            self.drain_floor_ms = self._drain_floor()

    # -- pieces -------------------------------------------------------------------------
    def _spin_rate(self) -> float:
        """Clock cycles of the spin kernel per millisecond on this card (the SM clock)."""
        start, end = self.event(enable_timing=True), self.event(enable_timing=True)
        self.spin(1000)
        cycles = 2_000_000
        self.record(start)
        self.spin(cycles)
        self.record(end)
        self.sync()
        return cycles / max(self.elapsed(start, end), 1e-3)

    def _drain_floor(self) -> float:
        """The drain of a call that does nothing (median of 9): what an honest call shows on this
        host, for the parent's hidden-work check."""
        drains = []
        for _ in range(9):
            end = self.event(enable_timing=True)
            self.record(end)
            drains.append(self._drain(end))
        return sorted(drains)[len(drains) // 2]

    def _drain(self, end) -> float:
        """Host ms of a device-wide synchronize once ``end`` has completed: it waits only for work
        on streams the caller's stream never waited for."""
        self.wait(end)
        t0 = self.clock()
        self.sync()
        return (self.clock() - t0) * 1e3

    def _pad(self) -> int:
        """A random shift, in bytes, for a buffer's placement (multiples of 512 bytes, the
        caching allocator's own alignment)."""
        return self.random.randrange(0, MAX_SHIFT_BYTES, 512) if self.shift else 0

    def stage(self, inputs: dict) -> tuple[dict, list]:
        """Fresh storages for the input tensors, keeping their views (q and k of one qkv stay
        views of one buffer), each at a random shift (``self.pads``, bytes, by storage).
        Returns the live inputs and the (source, copy) pairs; nothing is copied yet."""
        live, pairs, made = {}, [], {}
        self.pads.clear()   # in place: the worker watches this object's attributes
        for key, value in inputs.items():
            if type(value) is not self.tensor_type:
                live[key] = value
                continue
            src = self.storage(value)
            ptr = src.data_ptr()
            if ptr not in made:
                pad = self._pad()
                buf = self.empty(src.nbytes() + pad, dtype=torch.uint8, device=value.device)
                made[ptr] = (buf, pad)
                self.pads[self.storage(buf).data_ptr()] = pad
                pairs.append((self._bytes(src, value.device), buf[pad:]))
            buf, pad = made[ptr]
            view = self.empty(0, dtype=value.dtype, device=value.device)
            self.set_(view, self.storage(buf), pad // value.element_size() + value.storage_offset(),
                      value.shape, value.stride())
            live[key] = view
        return live, pairs

    def _bytes(self, storage, device):
        flat = self.empty(0, dtype=torch.uint8, device=device)
        return self.set_(flat, storage)

    def copy_in(self, pairs) -> None:
        for src, dst in pairs:
            self.copy(dst, src)

    def copy_back(self, pairs) -> None:
        for src, dst in pairs:
            self.copy(src, dst)

    def _flush_l2(self) -> None:
        """Overwrite a buffer >= 2x L2 with NaN and free it: L2 holds none of the inputs, and
        memory a later allocation may reuse holds NaN, not old answers. First the lines an
        earlier call marked evict_last are released (kbench/worker/between_calls.py): normal stores never evict them."""
        scratch = self.empty(self.flush_elems, device=self.device)
        self.release_persisting(scratch[:2 * self.l2_elems])
        self.fill(scratch, math.nan)
        del scratch

    def _lead_in(self) -> None:
        for _ in range(self.random.randrange(LEAD_IN_MAX + 1)):
            self.fill(self.lead_in_buf, 0.0)

    def outputs(self, out, inputs: dict, live: dict) -> list:
        """Snapshot of the outputs as they are now: a copy, or a reference for a view of an
        input (a cache updated in place), resolved against the parent's own tensor."""
        by_storage = {}
        for key, value in live.items():
            if type(value) is self.tensor_type:
                by_storage.setdefault(self.storage(value).data_ptr(), key)
        snap = []
        for t in out:
            ptr = self.storage(t).data_ptr()
            key = by_storage.get(ptr)
            if key is None:
                snap.append(self.clone(t))
            else:  # the offset in the parent's storage: without this call's shift (-1: in the shift)
                offset, rest = divmod(t.storage_offset() * t.element_size() - self.pads.get(ptr, 0),
                                      t.element_size())
                snap.append(OutputRef(key, str(t.dtype).removeprefix("torch."), -1 if rest else offset,
                                      tuple(t.shape), tuple(t.stride())))
        return snap

    # -- calls ------------------------------------------------------------------------
    def run(self, invoke, prepare, inputs: dict):
        """One untimed call (the first, checked one): (outputs, None)."""
        live, pairs = self.stage(inputs)
        self.copy_in(pairs)
        out = invoke(prepare(live))
        if self.cuda:
            self.sync()
        snap = self.outputs(out, inputs, live)
        self.copy_back(pairs)
        if self.cuda:
            self.sync()
        return snap

    def start_case(self) -> None:
        """A new case: its calls are primed only with its own inputs, and the gate gets another
        chance. Primed with the previous case's inputs, a library that plans per shape re-plans
        before every call, waiting for the device each time, so no call was ever held; and
        ``gate_off``, once set, stayed set for the worker's life: FlashInfer's mla baseline then
        read its host time (~1.3 ms on the H100 host) instead of its device time at every case
        after the first."""
        self.primer = None
        self.gate_off = False

    def timed(self, invoke, prepare, inputs: dict, graph: bool = False):
        """One timed call: (outputs, Sample)."""
        if not self.cuda:
            live, pairs = self.stage(inputs)
            self.copy_in(pairs)
            args = prepare(live)
            t0 = self.clock()
            out = invoke(args)
            host = (self.clock() - t0) * 1e3
            snap = self.outputs(out, inputs, live)
            self.copy_back(pairs)
            return snap, Sample(host, host, host, True, 0.0, 0, 0.0, 0.0)
        misses = 0
        while True:
            self.last_call = None
            out, live, pairs, sample = (self._graph_once if graph else self._once)(invoke, prepare, inputs)
            if sample.held or self.gate_off:
                # Shrink back towards what enqueueing really takes: a gate is spent device time.
                self.gate_ms = max(MIN_GATE_MS, min(self.gate_ms, 3 * self.enqueue_ms + 0.05))
                break
            misses += 1
            del out, live, pairs
            if self.gate_ms >= MAX_GATE_MS:
                self.gate_off = True
            self.gate_ms = min(2 * self.gate_ms, MAX_GATE_MS)
            if misses >= MAX_TRIES:
                self.gate_off = True
        # Kept for the next call's primer (eager calls only: a graph call captures anew).
        self.primer = self.last_call if sample.device_ms < PRIMER_BELOW_MS else None
        self.last_call = None
        snap = self.outputs(out, inputs, live)
        self.copy_back(pairs)
        self.sync()
        return snap, Sample(sample.device_ms, sample.settle_ms, sample.host_ms, sample.held,
                            sample.gate_ms, misses, sample.floor_ms, sample.sm_mhz, sample.drain_ms)

    def _events(self):
        return tuple(self.event(enable_timing=True) for _ in range(3))

    def _gate(self) -> tuple:
        """(gate ms, (event, event, cycles) around its spin or None): the spin counts SM clock
        cycles, so its event time is the SM clock just before the call, read on every call."""
        gate = 0.0 if self.gate_off else self.gate_ms
        if not gate:
            return 0.0, None
        cycles = int(gate * self.cycles_per_ms)
        before, after = self.event(enable_timing=True), self.event(enable_timing=True)
        self.record(before)
        self.spin(cycles)
        self.record(after)
        return gate, (before, after, cycles)

    def _finish(self, start, end, done, host, gate):
        held = not self.query(start)
        drain = self._drain(end)   # device-wide: work left on other streams is waited for here
        self.record(done)
        self.sync()
        gate_ms, spin = gate
        mhz = 0.0
        if spin is not None:
            spun_ms = self.elapsed(spin[0], spin[1])
            mhz = spin[2] / spun_ms / 1e3 if spun_ms > 0 else 0.0
        return Sample(self.elapsed(start, end), self.elapsed(start, done), host, held, gate_ms, 0,
                      self.drain_floor_ms, mhz, drain)

    def _prime(self, invoke) -> None:
        """The previous call of the same function again before the gate, on its own inputs
        prepared anew; outputs dropped."""
        if self.primer is not None:
            primed, prepare, live = self.primer
            if primed == invoke:   # == : a bound method is a new object at every access
                invoke(prepare(live))

    def _interlude(self) -> None:
        if self.interlude is not None:
            self.interlude.replay()

    def _once(self, invoke, prepare, inputs):
        start, end, done = self._events()
        live, pairs = self.stage(inputs)
        self.sync()
        self._prime(invoke)
        self._interlude()
        tg = self.clock()
        gate = self._gate()
        self.copy_in(pairs)
        args = prepare(live)
        self.last_call = (invoke, prepare, live)
        self.flush()
        spacer = self.empty(self._pad(), dtype=torch.uint8, device=self.device)  # moves the outputs too
        small = self.empty(self._pad() % SMALL_POOL_BYTES, dtype=torch.uint8, device=self.device)
        self._lead_in()
        self.record(start)
        t0 = self.clock()
        out = invoke(args)
        t1 = self.clock()
        self.record(end)
        del spacer, small
        self.enqueue_ms = (self.clock() - tg) * 1e3
        return out, live, pairs, self._finish(start, end, done, (t1 - t0) * 1e3, gate)

    def _graph_once(self, invoke, prepare, inputs):
        """--cuda-graph: capture the call (untimed), then time one replay behind the gate."""
        live, pairs = self.stage(inputs)
        self.copy_in(pairs)
        args = prepare(live)
        self.sync()
        graph = torch.cuda.CUDAGraph()
        t0 = self.clock()
        try:
            with torch.cuda.graph(graph):
                out = invoke(args)
        except Exception as exc:  # noqa: BLE001 - capture rules (no sync, no host reads)
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise RuntimeError(f"not capturable in a CUDA graph (--cuda-graph): "
                               f"{type(exc).__name__}: {first}") from exc
        host = (self.clock() - t0) * 1e3
        start, end, done = self._events()
        self.sync()
        self._interlude()
        gate = self._gate()
        self.flush()
        self._lead_in()
        self.record(start)
        graph.replay()
        self.record(end)
        self.enqueue_ms = (self.clock() - t0) * 1e3 - host
        return out, live, pairs, self._finish(start, end, done, host, gate)
