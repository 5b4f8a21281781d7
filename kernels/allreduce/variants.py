"""Compiled kernel variants: a process-wide cache keyed by configuration, and the compile gate.

Every kernel of this family takes raw 64-bit addresses and scalars, so a
variant compiles from placeholders alone, without a GPU. The rank is a
runtime argument: the virtual ranks of one process share every compiled
variant. ``compiled(kernel, arch)`` compiles once per ``(kernel.key(), arch)``
under a lock (virtual ranks construct concurrently) and refuses to compile
while the current CUDA stream is being captured into a graph.

``compile_variants(arch)`` compiles every variant the family has (LL and BT
publish, plain and finalize, multicast and unicast fan-out; the owner reduce
with both fan-outs; the consumer for LL and BT with plain, MXFP8 and
residual-only outputs) at the seed's preset shape, for the compile gate.
"""

from __future__ import annotations

import threading
from typing import Any

import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from kernels.allreduce.consumer import OUTPUTS, LamportMHCConsumer
from kernels.allreduce.owner_reduce import OwnerReduceKernel
from kernels.allreduce.publish import FANOUTS, PROTOCOLS, SOURCES, PublishKernel

GATE_SHAPE = {"hidden": 5120, "hc": 4, "tp": 8, "capacity": 128, "top_k": 8}

_CACHE: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def placeholder_args(kernel: Any) -> tuple:
    """Compile-time stand-ins for the arguments of ``kernel.__call__`` (addresses 0, one row)."""
    stream = cute.runtime.make_fake_stream()
    if isinstance(kernel, PublishKernel):
        return (*[Int64(0)] * 6, Int32(0), Int32(1), stream)
    if isinstance(kernel, OwnerReduceKernel):
        return (*[Int64(0)] * 5, Int32(0), Int32(0), Int32(1), stream)
    if isinstance(kernel, LamportMHCConsumer):
        return (*[Int64(0)] * 11, Float32(0.0), Int64(0), Int64(0), Int32(0), Int32(0), Int32(1), stream)
    raise TypeError(f"not an all-reduce kernel: {type(kernel).__name__}")


def _capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (False without CUDA)."""
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:  # noqa: BLE001 - no usable CUDA means no capture
        return False


def compiled(kernel: Any, arch: str, options: str = "") -> Any:
    """The compiled ``kernel`` for ``arch`` (``sm_90a``/``sm_100a``), compiled on first use only."""
    key = (kernel.key(), arch, options)
    with _LOCK:
        if key not in _CACHE:
            if _capturing():
                raise RuntimeError(
                    f"allreduce kernel {kernel.key()} is not compiled and the stream is capturing a CUDA graph: "
                    "construct the instance (which compiles every variant it uses) before capture"
                )
            _CACHE[key] = cute.compile(
                kernel, *placeholder_args(kernel), options=f"--gpu-arch {arch} {options}".strip()
            )
        return _CACHE[key]


def gate_kernels(arch: str, shape: dict | None = None) -> dict[str, Any]:
    """Every kernel variant of the family at ``shape`` (default: the seed's preset), by name."""
    s = dict(GATE_SHAPE if shape is None else shape)
    kernels: dict[str, Any] = {}
    for protocol in PROTOCOLS:
        for source in SOURCES:
            for fanout in FANOUTS if protocol == "ll" else ("unicast",):
                kernels[f"publish_{protocol}_{source}_{fanout}"] = PublishKernel(
                    hidden=s["hidden"], tp=s["tp"], capacity=s["capacity"], protocol=protocol, source=source,
                    fanout=fanout, top_k=s["top_k"],
                )
    for fanout in FANOUTS:
        kernels[f"owner_reduce_{fanout}"] = OwnerReduceKernel(
            hidden=s["hidden"], tp=s["tp"], capacity=s["capacity"], fanout=fanout
        )
    for reduced_input in (False, True):
        for output in OUTPUTS:
            name = f"consumer_{'bt' if reduced_input else 'll'}_{output}"
            kernels[name] = LamportMHCConsumer(
                hidden=s["hidden"], hc=s["hc"], tp=s["tp"], capacity=s["capacity"], reduced_input=reduced_input,
                output=output, arch=arch,
            )
    return kernels


def compile_variants(arch: str, options: str = "") -> dict[str, Any]:
    """Compile every variant for ``arch`` without a GPU; returns the compiled functions by name."""
    return {name: compiled(kernel, arch, options) for name, kernel in gate_kernels(arch).items()}
