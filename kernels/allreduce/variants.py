"""Compiled kernel variants: a process-wide cache keyed by configuration, and the compile gate.

Every kernel of this family takes raw 64-bit addresses and scalars, so a
variant compiles from placeholders alone, without a GPU. The rank is a
runtime argument: the virtual ranks of one process share every compiled
variant. ``compiled(kernel, arch)`` compiles once per ``(kernel.key(), arch)``
under a lock (virtual ranks construct concurrently) and refuses to compile
while the current CUDA stream is being captured into a graph.

``preload`` (``kernels.loading``, re-exported here) loads a compiled
variant into the current context at construction (no lazy load at launch).

``compile_variants(arch)`` is the compile gate's registry
(``harness/compile_gate.py``): it compiles nothing itself and returns
``(name, thunk(options), must_not_spill)`` for every variant the family has
(LL and BT publish, plain and finalize, multicast and unicast fan-out; the
owner reduce with both fan-outs; the consumer for LL and BT with plain,
MXFP8 and residual-only outputs) at the seed's preset shape. A thunk goes
through the same ``compiled`` cache as the host class, with the gate's
options (which carry ``--gpu-arch``) passed through unchanged.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from kernels.allreduce.consumer import OUTPUTS, LamportMHCConsumer
from kernels.allreduce.owner_reduce import OwnerReduceKernel
from kernels.allreduce.publish import FANOUTS, PROTOCOLS, SOURCES, PublishKernel
from kernels.compile_clock import compiling
from kernels.loading import preload  # noqa: F401 - kernels.allreduce.host calls variants.preload

GATE_SHAPE = {"hidden": 5120, "hc": 4, "tp": 8, "capacity": 128, "top_k": 8}

_CACHE: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def placeholder_args(kernel: Any) -> tuple:
    """Compile-time stand-ins for the arguments of ``kernel.__call__`` (addresses 0, one row, one CTA)."""
    stream = cute.runtime.make_fake_stream()
    if isinstance(kernel, PublishKernel):
        return (*[Int64(0)] * 6, Int32(0), Int32(1), stream)
    if isinstance(kernel, OwnerReduceKernel):
        return (*[Int64(0)] * 5, Int32(0), Int32(0), Int32(1), Int32(1), stream)
    if isinstance(kernel, LamportMHCConsumer):
        return (*[Int64(0)] * 11, Float32(0.0), Int64(0), Int64(0), Int32(0), Int32(0), Int32(1), Int32(1), stream)
    raise TypeError(f"not an all-reduce kernel: {type(kernel).__name__}")


def _capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (False without CUDA)."""
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:  # noqa: BLE001 - no usable CUDA means no capture
        return False


def compiled(kernel: Any, arch: str, options: str = "", *, with_arch: bool = True) -> Any:
    """The compiled ``kernel`` for ``arch`` (``sm_90a``/``sm_100a``), compiled on first use only;
    ``with_arch`` adds ``--gpu-arch`` to ``options`` (the compile gate passes its own)."""
    key = (kernel.key(), arch, options)
    with _LOCK:
        if key not in _CACHE:
            if _capturing():
                raise RuntimeError(
                    f"allreduce kernel {kernel.key()} is not compiled and the stream is capturing a CUDA graph: "
                    "construct the instance (which compiles every variant it uses) before capture"
                )
            full = f"--gpu-arch {arch} {options}".strip() if with_arch else options
            with compiling():
                _CACHE[key] = cute.compile(kernel, *placeholder_args(kernel), options=full)
        return _CACHE[key]


def gate_kernels(arch: str, shape: dict | None = None) -> dict[str, Any]:
    """Every kernel variant of the family at ``shape`` (default: the seed's preset), by name."""
    s = dict(GATE_SHAPE if shape is None else shape)
    kernels: dict[str, Any] = {}
    for protocol in PROTOCOLS:
        for source in SOURCES:
            for fanout in FANOUTS if protocol == "ll" else ("unicast",):
                kernels[f"publish[{protocol},{source},{fanout}]"] = PublishKernel(
                    hidden=s["hidden"], tp=s["tp"], capacity=s["capacity"], protocol=protocol, source=source,
                    fanout=fanout, top_k=s["top_k"],
                )
    for fanout in FANOUTS:
        kernels[f"owner_reduce[{fanout}]"] = OwnerReduceKernel(
            hidden=s["hidden"], tp=s["tp"], capacity=s["capacity"], fanout=fanout
        )
    for reduced_input in (False, True):
        for output in OUTPUTS:
            name = f"consumer[{'bt' if reduced_input else 'll'},{output}]"
            kernels[name] = LamportMHCConsumer(
                hidden=s["hidden"], hc=s["hc"], tp=s["tp"], capacity=s["capacity"], reduced_input=reduced_input,
                output=output, arch=arch,
            )
    return kernels


def compile_variants(arch: str) -> list[tuple[str, Callable[[str], Any], bool]]:
    """The compile gate's registry (``harness/compile_gate.py``): ``(name, thunk(options), must_not_spill)``
    for every variant; a thunk compiles with the gate's options (which carry ``--gpu-arch``) unchanged."""

    def thunk_of(kernel: Any) -> Callable[[str], Any]:
        """A thunk compiling ``kernel`` with the gate's options."""
        return lambda options: compiled(kernel, arch, options, with_arch=False)

    return [(f"allreduce.{name}", thunk_of(kernel), True) for name, kernel in gate_kernels(arch).items()]
