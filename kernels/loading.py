"""Eager loading of compiled CuTe DSL kernels into the current CUDA context.

CUDA's default module loading is lazy (``CU_MODULE_LAZY_LOADING``; CuTe DSL
4.8.1 relies on it, see its ``jit_executor.py``): a kernel's code is loaded
at its first launch, and that load waits for the device. Kernels whose grids
spin on a peer rank (the sharded sampler's mailbox waits, the all-reduce's
Lamport waits) make that wait unbounded when
ranks share a device (``kernels.fabric.VirtualFabric``): a rank whose first
launch of a variant comes while a peer's grid waits for that very launch
blocks in the load, and the peer times out. ``preload`` moves the load to
construction time, before the ranks' construction barrier, so no launch ever
loads code.

Mechanism: ``compiled.to(None)`` loads the compiled function's CUDA library
or modules into the current context (their kernels still lazy) and gives an
executor, which becomes the function's call executor if it has none (CuTe
DSL would otherwise make one, setting kernel attributes, inside the first
call); every kernel
is then enumerated (``cudaLibraryEnumerateKernels`` for libraries, the
module list otherwise), mapped to its function in the current context
(``cuKernelGetFunction``) and loaded (``cuFuncLoad``). Loading an already
loaded function is a no-op, so calling it once per instance is cheap. Its
wall time counts as loading (``kernels.compile_clock.loading``).
"""

from __future__ import annotations

from typing import Any

from kernels.compile_clock import loading


def _check(result: tuple, what: str) -> tuple:
    """The values of a cuda-python call after its status, or a RuntimeError naming ``what``."""
    status, *values = result
    if int(status) != 0:
        raise RuntimeError(f"{what} failed: {status}")
    return tuple(values)


def _adopt_default_executor(function: Any, executor: Any) -> None:
    """Make ``executor`` the compiled function's call executor if it has none yet, as its first call would.

    CuTe DSL 4.8.1 creates that executor (``cuKernelGetFunction`` and the
    kernel attributes) inside the first call; adopting the one made here
    keeps that driver work out of the first launch as well."""
    lock = getattr(function, "_executor_lock", None)
    if lock is None or not hasattr(function, "_default_executor"):
        return
    with lock:
        if function._default_executor is None:
            function._default_executor = executor


def kernels_of(function: Any) -> list:
    """Every ``CUkernel`` of a compiled function, its library or modules loaded into the current context."""
    import cuda.bindings.driver as driver
    import cuda.bindings.runtime as runtime

    executor = function.to(None)  # loads the library or modules (their kernels stay lazy)
    _adopt_default_executor(function, executor)
    kernels = []
    for library in getattr(function.jit_module, "cuda_library", None) or []:
        (count,) = _check(runtime.cudaLibraryGetKernelCount(library), "cudaLibraryGetKernelCount")
        (found,) = _check(runtime.cudaLibraryEnumerateKernels(count, library), "cudaLibraryEnumerateKernels")
        kernels += [driver.CUkernel(int(kernel)) for kernel in found]
    kernels += [loaded.kernel for loaded in getattr(function.jit_module, "cuda_modules", None) or []]
    if not kernels:
        raise RuntimeError("preload: the compiled function exposes no kernels to load")
    return kernels


def preload(function: Any) -> int:
    """Load every kernel of a compiled function into the current CUDA context now (timed as loading); say how many."""
    import cuda.bindings.driver as driver

    with loading():
        kernels = kernels_of(function)
        for kernel in kernels:
            (handle,) = _check(driver.cuKernelGetFunction(kernel), "cuKernelGetFunction")
            _check(driver.cuFuncLoad(handle), "cuFuncLoad")
    return len(kernels)


__all__ = ["kernels_of", "preload"]
