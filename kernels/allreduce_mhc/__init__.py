"""Seed 004's Lamport all-reduce fused with mHC post-mix, collapse, RMSNorm and MXFP8.

Modules: ``layout`` (buffer shapes, thread maps, constants), ``config``
(argument validation), ``device`` (DSL building blocks), ``kernel_shape``
(the shape the three kernel classes share), ``publish``,
``owner_reduce`` and ``consumer`` (the three kernels), ``variants`` (compiles
through ``kernels.compile``; ``compile_variants`` for the compile gate), ``host``
(``AllReduceMHC``, the seed's public API: ``__call__`` and ``finalize``). The compile
gate finds ``kernels.allreduce_mhc.variants.compile_variants``.
Importing the package does not import CuTe DSL; the kernels are loaded on
first use of ``AllReduceMHC`` or ``compile_variants``.

The family declares its flight-recorder identity here, where
``kernels.flight`` finds it: ``FLIGHT_CODE`` (the ring header's and
record's family code) and ``FLIGHT_KERNELS`` (its kernels, in the order of
their numbers).
"""

from __future__ import annotations

FLIGHT_CODE = 3
FLIGHT_KERNELS = ("publish", "owner_reduce", "consumer")


def __getattr__(name: str):
    """Load the DSL-dependent entry points lazily."""
    if name == "AllReduceMHC":
        from kernels.allreduce_mhc.host import AllReduceMHC

        return AllReduceMHC
    raise AttributeError(name)


__all__ = ["AllReduceMHC"]
