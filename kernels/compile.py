"""The one way a kernel of this package is compiled: cache, lock, capture check, example arguments.

Every kernel class (``kernels.variant.KernelVariant``) takes raw 64-bit
addresses and scalars, so ``cute.compile`` needs no tensors: the example
arguments of a class are derived once from the annotations of its
``@cute.jit __call__`` (``Int64`` 0, ``Int32`` 1, ``Float32`` 0.0, a fake
stream for ``cuda.CUstream``) and a variant compiles without a GPU. The
values are placeholders: every one of them is a runtime argument of the
compiled function, none is baked into the code.

``compiled(kernel, options, remedy=...)`` is the only call of
``cute.compile`` for the kernel families (the fused Markov loop, the sharded
Markov sampler, the all-reduce, the probes). It keeps one process-wide cache
keyed by the kernel's class, its ``key()`` (the compile-time configuration)
and the options, so virtual ranks (threads of one process) and the compile
gate share every compiled variant; one lock serialises compiles and cache
reads, because ranks construct concurrently. This module owns the cache and
the kernel objects in it: a kernel object stays alive as long as its compiled
function, because the DSL keys some tracing state by ``id()``, which a freed
object's address could otherwise hand to the next kernel traced.

Nothing compiles while the current CUDA stream captures a graph (a graph
holds launches, not the host work of a compile, so every variant a captured
call launches must exist before capture): a variant that is not cached by
then raises ``CaptureError``, which names the variant and says what compiles
it ahead of capture (``remedy``).
Below the process-wide cache, ``kernels.artifact_cache`` keeps compiled
variants on disk where ``$RANKCHECK_KERNEL_ARTIFACTS`` names a directory (as
``validate`` does for its jobs): a variant found there is loaded, not
compiled (no tracing, no ptxas, no JIT engine); one that is not is compiled,
stored, and the stored object loaded, so every process launches the same
loaded object. Every compile's wall time (with the export of its object) goes
to ``kernels.compile_clock``'s compile seconds, the time to compute the key
and load an object to its load seconds, so a run can tell compiling from
loading.

``preload`` (``kernels.loading``) loads a compiled function's code into the
current CUDA context; the host classes whose grids spin on a peer call it at
construction (see that module for why).

Torch and CuTe DSL are imported when first needed, so importing a host module
(e.g. for ``capturing``) costs neither.
"""

from __future__ import annotations

import threading
import typing
from typing import Any

from kernels import artifact_cache
from kernels.compile_clock import compiling, loading
from kernels.loading import preload

_LOCK = threading.Lock()
# (class module, class name, key(), options) -> (kernel object, compiled function)
_COMPILED: dict[tuple, tuple[Any, Any]] = {}
# kernel class -> the annotation types of its __call__'s arguments, in order
_ARGUMENT_TYPES: dict[type, tuple[type, ...]] = {}


class CaptureError(RuntimeError):
    """A kernel variant would have to compile while a CUDA graph is being captured."""


def capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (False without usable CUDA)."""
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:  # noqa: BLE001 - no usable CUDA means no capture
        return False


def argument_types(kernel_class: type) -> tuple[type, ...]:
    """The annotated types of ``kernel_class.__call__``'s arguments after ``self``, resolved once per class."""
    types = _ARGUMENT_TYPES.get(kernel_class)
    if types is None:
        hints = typing.get_type_hints(kernel_class.__call__)
        hints.pop("return", None)
        types = _ARGUMENT_TYPES[kernel_class] = tuple(hints.values())
    return types


def example_arguments(kernel: Any) -> list:
    """Compile-time stand-ins for the arguments of ``kernel.__call__``: addresses 0, sizes 1, a fake stream."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    placeholders = {Int64: lambda: Int64(0), Int32: lambda: Int32(1), Float32: lambda: Float32(0.0),
                    cuda.CUstream: cute.runtime.make_fake_stream}
    arguments = []
    for kind in argument_types(type(kernel)):
        if kind not in placeholders:
            raise TypeError(f"{type(kernel).__name__}.__call__: no example argument for a {kind.__name__}")
        arguments.append(placeholders[kind]())
    return arguments


def compiled(kernel: Any, options: str | None = None, *, remedy: str) -> Any:
    """The compiled ``kernel`` with ``options`` (compiled on first use, cached); ``CaptureError`` under capture.

    ``remedy`` says what compiles the variant ahead of capture (e.g. ``"build
    MarkovKernels"``); the error ends with it and "before capturing"."""
    key = (type(kernel).__module__, type(kernel).__qualname__, kernel.key(), options or "")
    with _LOCK:
        entry = _COMPILED.get(key)
        if entry is None:
            if capturing():
                raise CaptureError(
                    f"{type(kernel).__name__}{kernel.key()} is not compiled and cannot compile under CUDA graph "
                    f"capture: {remedy} before capturing"
                )
            entry = _COMPILED[key] = (kernel, _loaded_or_compiled(kernel, options))
        return entry[1]


def compile_now(kernel: Any, options: str | None) -> Any:
    """``cute.compile`` of ``kernel`` with its example arguments and ``options``, timed as compiling."""
    import cutlass.cute as cute

    arguments = example_arguments(kernel)
    with compiling():
        return cute.compile(kernel, *arguments, options=options) if options else cute.compile(kernel, *arguments)


def _loaded_or_compiled(kernel: Any, options: str | None) -> Any:
    """``kernel`` with ``options`` from the artifact directory, or compiled (and stored, then loaded from it)."""
    root = artifact_cache.directory()
    if root is None:
        return compile_now(kernel, options)
    with loading():
        key = artifact_cache.artifact_key(kernel, options)
        function = artifact_cache.load(root, key)
    if function is not None:
        return function
    function = compile_now(kernel, options)
    with compiling():
        stored = artifact_cache.store(root, key, function)
    if not stored:
        return function
    with loading():
        loaded = artifact_cache.load(root, key)
    return function if loaded is None else loaded


__all__ = ["CaptureError", "argument_types", "capturing", "compile_now", "compiled", "example_arguments", "preload"]
