"""Seed 004's Lamport all-reduce fused with mHC post-mix, collapse, RMSNorm and MXFP8.

Modules: ``layout`` (buffer shapes, thread maps, constants), ``config``
(argument validation), ``device`` (DSL building blocks), ``kernel_shape``
(the shape the three kernel classes share), ``publish``,
``owner_reduce`` and ``consumer`` (the three kernels), ``variants`` (compiles
through ``kernels.compile``; ``compile_variants`` for the compile gate), ``host``
(``AllReduceMHC``, the seed's public API: ``__call__`` and ``finalize``). The compile
gate finds ``kernels.allreduce.variants.compile_variants``.
Importing the package does not import CuTe DSL; the kernels are loaded on
first use of ``AllReduceMHC`` or ``compile_variants``.
"""

from __future__ import annotations

def __getattr__(name: str):
    """Load the DSL-dependent entry points lazily."""
    if name == "AllReduceMHC":
        from kernels.allreduce.host import AllReduceMHC

        return AllReduceMHC
    raise AttributeError(name)


__all__ = ["AllReduceMHC"]
