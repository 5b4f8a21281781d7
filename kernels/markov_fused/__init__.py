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

The family declares its flight-recorder identity here, where
``kernels.flight`` finds it: ``FLIGHT_CODE`` (the ring header's and
record's family code) and ``FLIGHT_KERNELS`` (its kernels, in the order of
their numbers). Importing the package does not import CuTe DSL or torch;
``MarkovKernels`` is loaded on first use of the package's name for it.
"""

from __future__ import annotations

FLIGHT_CODE = 2
FLIGHT_KERNELS = ("anchor", "step", "pick", "fill", "gather")


def __getattr__(name: str):
    """Load the DSL-dependent public class lazily."""
    if name == "MarkovKernels":
        from kernels.markov_fused.host import MarkovKernels

        return MarkovKernels
    raise AttributeError(name)


__all__ = ["MarkovKernels"]
