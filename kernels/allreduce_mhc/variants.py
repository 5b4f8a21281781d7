"""Compiled kernel variants of the all-reduce, and the compile gate's registry.

Every kernel of this family takes raw 64-bit addresses and scalars, so a
variant compiles from placeholders alone, without a GPU. The rank is a
runtime argument: the virtual ranks of one process share every compiled
variant. ``compiled(kernel, arch)`` adds ``--gpu-arch`` to the options and
compiles through ``kernels.compile`` (the one process-wide cache and lock of
every family, example arguments derived from the kernel's ``__call__``,
``CaptureError`` instead of a compile while the current CUDA stream is being
captured into a graph).

``preload`` (``kernels.loading``, re-exported here) loads a compiled
variant into the current context at construction (no lazy load at launch).

``compile_variants(arch)`` is the compile gate's registry
(``harness/compile_gate.py``): it compiles nothing itself and returns
``(name, thunk(options), must_not_spill)`` for every variant the family has
(LL and BT publish, plain and finalize, multicast and unicast fan-out; the
owner reduce with both fan-outs; the consumer for LL and BT with plain,
MXFP8 and residual-only outputs) at the seed's preset shape. A thunk goes
through the same cache as the host class, with the gate's options (which
carry ``--gpu-arch``) passed through unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

from kernels.allreduce_mhc.consumer import OUTPUTS, LamportMHCConsumer
from kernels.allreduce_mhc.owner_reduce import OwnerReduceKernel
from kernels.allreduce_mhc.publish import FANOUTS, PROTOCOLS, SOURCES, PublishKernel
from kernels.compile import CaptureError, compiled as compiled_once
from kernels.compile import preload  # noqa: F401 - kernels.allreduce_mhc.host calls variants.preload

GATE_SHAPE = {"hidden": 5120, "hc": 4, "tp": 8, "capacity": 128, "top_k": 8}


def compiled(kernel: Any, arch: str, options: str = "", *, with_arch: bool = True) -> Any:
    """The compiled ``kernel`` for ``arch`` (``sm_90a``/``sm_100a``), compiled on first use only;
    ``with_arch`` adds ``--gpu-arch`` to ``options`` (the compile gate passes its own)."""
    full = f"--gpu-arch {arch} {options}".strip() if with_arch else options
    return compiled_once(kernel, full, remedy="construct the AllReduceMHC (which compiles every variant it uses)")


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
    # Without the flight recorder (AllReduceMHC(flight_recorder=False)): one variant of each kernel.
    kernels["publish[ll,plain,unicast,noflight]"] = PublishKernel(
        hidden=s["hidden"], tp=s["tp"], capacity=s["capacity"], protocol="ll", source="plain", fanout="unicast",
        top_k=s["top_k"], flight=False)
    kernels["owner_reduce[unicast,noflight]"] = OwnerReduceKernel(
        hidden=s["hidden"], tp=s["tp"], capacity=s["capacity"], fanout="unicast", flight=False)
    kernels["consumer[ll,plain,noflight]"] = LamportMHCConsumer(
        hidden=s["hidden"], hc=s["hc"], tp=s["tp"], capacity=s["capacity"], reduced_input=False, output="plain",
        arch=arch, flight=False)
    return kernels


def compile_variants(arch: str) -> list[tuple[str, Callable[[str], Any], bool]]:
    """The compile gate's registry (``harness/compile_gate.py``): ``(name, thunk(options), must_not_spill)``
    for every variant; a thunk compiles with the gate's options (which carry ``--gpu-arch``) unchanged."""

    def thunk_of(kernel: Any) -> Callable[[str], Any]:
        """A thunk compiling ``kernel`` with the gate's options."""
        return lambda options: compiled(kernel, arch, options, with_arch=False)

    return [(f"allreduce.{name}", thunk_of(kernel), True) for name, kernel in gate_kernels(arch).items()]


__all__ = ["CaptureError", "GATE_SHAPE", "compile_variants", "compiled", "gate_kernels", "preload"]
