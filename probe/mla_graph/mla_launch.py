"""Launching a compiled Triton or Gluon kernel without the JIT's per-call dispatch.

Through ``kernel[grid](...)`` every launch binds the arguments, builds the specialisation key,
looks the compiled kernel up and checks the globals it read: on the H200 host that is 50-70 us of
Python a launch (and ~0.2 ms for the Gluon attention with its four TensorDescriptor objects),
where the whole call's kernels run for 180 us at prefill 128. In the original's native protocol
(host clock around a synchronized call) the call took ~1 ms to return, most of it that Python.

``Kernels.launch`` runs the first launch of a specialisation through the JIT (which compiles it)
and keeps the compiled kernel; later launches with the same key call the kernel's own launcher.
The key holds everything the JIT's own key is made of, at least as finely: the function, the
device, each tensor's dtype and 16-byte alignment, each integer's class (== 1, % 16 == 0, other),
the constexprs and the launch options. A key finer than the JIT's costs one more JIT launch, never
a wrong kernel. Nothing here holds data: a compiled kernel, a launcher's argument count, and (for
TMA descriptors) an encoded descriptor, which is a function of an address, a shape, the strides
and the block, never of what lies there, so a later tensor at the same address gets the one it
would be encoded to. The launchers are Triton 3.6's internals: where they differ (another Triton),
every launch goes through the JIT as before.
"""
import torch

_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def raw_stream(device: torch.device) -> int:
    """The current CUDA stream's handle on ``device`` (the one Triton's launcher reads), cheaply."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _RAW_STREAM(index) if _RAW_STREAM is not None else torch.cuda.current_stream(index).cuda_stream


def arg_class(a):
    """What the JIT's key takes from one argument (at least as finely)."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    if isinstance(a, bool) or not isinstance(a, int):
        return type(a)
    if not -2 ** 31 <= a < 2 ** 31:
        return "i64"   # the JIT types such an integer i64, and specialises it no further here
    return 1 if a == 1 else (16 if a % 16 == 0 else 0)


class Kernels:
    """Compiled kernels by specialisation key, each launched directly after its first launch."""

    def __init__(self):
        self.compiled = {}   # key -> (compiled kernel, how many arguments its launcher takes)

    def launch(self, fn, grid: tuple, device: torch.device, args: tuple, constexprs: dict, options: dict):
        """``fn[grid](*args, **constexprs, **options)``, directly where this specialisation has run before.
        ``args``: the runtime arguments, tensors or Python scalars; ``constexprs`` in the kernel's order."""
        key = (fn, device, tuple(map(arg_class, args)), tuple(constexprs.items()), tuple(options.items()))
        found = self.compiled.get(key)
        if found is not None:
            kernel, counts = found
            stream = raw_stream(device)
            full = (*args, *constexprs.values(), *options.values())
            for n in counts:
                try:
                    kernel.run(*(tuple(grid) + (1,) * (3 - len(grid))), stream, kernel.function,
                               kernel.packed_metadata, None, None, None, *full[:n])
                except TypeError:   # raised before anything is launched: the launcher takes another count
                    continue
                self.compiled[key] = (kernel, (n,))
                return kernel
            self.compiled[key] = (None, ())   # neither count: this key goes through the JIT from now on
        kernel = fn[grid](*args, **constexprs, **options)
        if kernel is not None and key not in self.compiled:
            # The launcher takes the runtime arguments, in some Triton versions the constexprs (and the
            # options the kernel declares) after them: the next launch tries the longer form first.
            self.compiled[key] = (kernel, (len(args) + len(constexprs) + len(options), len(args) + len(constexprs),
                                           len(args)))
        return kernel


class DescriptorLauncher:
    """A compiled Gluon kernel whose first arguments are TMA descriptors, launched through the raw C
    launcher under Triton's Python one, each descriptor encoded once per (address, shape, strides,
    block) instead of built as a TensorDescriptor object and encoded on every call. ``create``
    returns None where the launcher's internals are not the ones this was written for."""

    CACHE = 64

    def __init__(self, kernel, n_descriptors: int):
        run = kernel.run
        cells = dict(zip(run.launch.__code__.co_freevars, (c.cell_contents for c in run.launch.__closure__)))
        self.raw, self.meta = cells["launcher"], cells["tensordesc_meta"]
        if (len(self.meta) != n_descriptors or any(m is None for m in self.meta) or run.global_scratch_size
                or run.profile_scratch_size or run.launch_cooperative_grid):
            raise TypeError("not the launcher this was written for")
        self.base = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     kernel.packed_metadata, None, None, None)
        from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
        from triton.runtime.driver import driver
        self.fill, self.to_host, self.maps = driver.active.utils.fill_tma_descriptor, TMA_DTYPE_DEVICE_TO_HOST, {}
        self.n_args = None   # how many non-descriptor arguments the launcher takes: found on the first call

    @classmethod
    def create(cls, kernel, n_descriptors: int):
        try:
            return cls(kernel, n_descriptors)
        except Exception:  # noqa: BLE001 - any difference in Triton's internals: the JIT launch
            return None

    def encoded(self, i: int, ptr: int, shape: tuple, strides: tuple) -> list:
        """Descriptor i's launcher arguments over ``shape`` (elements) with ``strides`` (elements, the
        last 1) at address ``ptr``."""
        meta = self.meta[i]
        key = (ptr, shape, strides, tuple(meta["block_size"]))
        found = self.maps.get(key)
        if found is None:
            if len(self.maps) >= self.CACHE:
                self.maps.pop(next(iter(self.maps)))
            found = self.maps[key] = [self.fill(ptr, meta["swizzle"], meta["elem_size"],
                                                self.to_host[meta["elem_type"]], meta["block_size"],
                                                list(shape), list(strides), 0), *shape, *strides]
        return found

    def __call__(self, grid: tuple, stream: int, descriptors: list, runtime: tuple, constexprs: tuple) -> bool:
        """Launch with ``descriptors`` as ``encoded`` gives them, then the other runtime arguments (pointers as
        ints) and the constexprs' values. False, with nothing launched, where the launcher refuses them."""
        rest = (*runtime, *constexprs)
        counts = (self.n_args,) if self.n_args is not None else (len(rest), len(runtime))
        for n in counts:
            try:
                self.raw(*grid, stream, *self.base, *descriptors, *rest[:n])
            except TypeError:   # the argument count, checked before anything is launched
                continue
            self.n_args = n
            return True
        return False


class Direct:
    """One compiled Triton kernel's C launcher, fed integers: pointers as addresses, so it neither asks
    each tensor for its data_ptr nor the driver about each pointer, as it does for a tensor. The caller
    keeps what the JIT specialised on (dtypes, 16-byte alignment, integer classes) as the first launch
    had them. ``create`` returns None where the launcher is not the one this was written for (another
    Triton, or a kernel that needs scratch memory)."""

    def __init__(self, kernel):
        run = kernel.run
        if run.global_scratch_size or run.profile_scratch_size or run.launch_cooperative_grid:
            raise TypeError("not the launcher this was written for")
        self.raw = run.launch
        self.base = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     kernel.packed_metadata, None, None, None)
        self.n_args = None   # how many of (runtime, constexprs) the launcher takes: found on the first call

    @classmethod
    def create(cls, kernel):
        try:
            return cls(kernel)
        except Exception:  # noqa: BLE001 - any difference in Triton's internals: the JIT launch
            return None

    def __call__(self, grid: tuple, stream: int, runtime: tuple, constexprs: tuple) -> bool:
        """Launch over ``grid`` (3 ints); False, with nothing launched, where the launcher refuses the arguments."""
        full = (*runtime, *constexprs)
        for n in ((self.n_args,) if self.n_args is not None else (len(full), len(runtime))):
            try:
                self.raw(*grid, stream, *self.base, *full[:n])
            except TypeError:   # the argument count, checked before anything is launched
                continue
            self.n_args = n
            return True
        return False
