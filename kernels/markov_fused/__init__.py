"""Seed 001's fused Markov draft loop: every kernel module of the ``markov_fused`` family.

Modules: ``host`` (``MarkovKernels``, the seed's functions, ``compile_kernel``
and ``compile_variants`` for the compile gate), ``kernel`` (the device
kernels ``AnchorKernel``, ``StepKernel``, ``PickKernel``,
``CacheFillKernel``), ``layout`` (constants and variant rules), ``checks``
(argument checks, with the public ``require`` / ``check_tensor``),
``exchange``, ``exchange_kernel`` and ``exchange_layout`` (the device
all-gather ``PeerGather`` of a sharded loop) and ``head_gemv`` /
``head_gemv_kernel`` (``HeadGemv``, the per-step bias GEMV the seed leaves to
its caller). The head tile and the argument groups come from
``kernels.markov_common``.

Its flight-recorder identity (``kernels.flight``): family code 2, kernels
anchor, step, pick, fill and gather. ``MarkovKernels`` is imported on first
use (``kernels.lazy_export``).
"""

from __future__ import annotations

from kernels.lazy_export import lazy_exports

FLIGHT_CODE = 2
FLIGHT_KERNELS = ("anchor", "step", "pick", "fill", "gather")

__getattr__ = lazy_exports({"MarkovKernels": "kernels.markov_fused.host"})


__all__ = ["MarkovKernels"]
