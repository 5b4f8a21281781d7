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

Its flight-recorder identity (``kernels.flight``): family code 3, kernels
publish, owner_reduce and consumer. ``AllReduceMHC`` is imported on first
use (``kernels.lazy_export``).
"""

from __future__ import annotations

from kernels.lazy_export import lazy_exports

FLIGHT_CODE = 3
FLIGHT_KERNELS = ("publish", "owner_reduce", "consumer")

__getattr__ = lazy_exports({"AllReduceMHC": "kernels.allreduce_mhc.host"})


__all__ = ["AllReduceMHC"]
