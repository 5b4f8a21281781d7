"""Seed 000's sharded Markov sampler: every kernel module of the ``markov_sharded`` family.

Modules: ``host`` (``ShardedMarkovSampler``, the seed's public API, and
``compile_variants`` for the compile gate), ``kernel`` (the cooperative
kernel ``ShardedMarkovSample``), ``layout`` (buffer layout, keys and tags,
pure Python), ``checks`` (the host checks of config and call) and ``probe``
(a probe of the kernel's bias MMA chain on a GPU). The head tile and the
argument groups come from ``kernels.markov_common``.

The family declares its flight-recorder identity here, where
``kernels.flight`` finds it: ``FLIGHT_CODE`` (the ring header's and
record's family code) and ``FLIGHT_KERNELS`` (its kernels, in the order of
their numbers). Importing the package does not import CuTe DSL or torch;
``ShardedMarkovSampler`` is loaded on first use of the package's name for it.
"""

from __future__ import annotations

FLIGHT_CODE = 1
FLIGHT_KERNELS = ("sample",)


def __getattr__(name: str):
    """Load the DSL-dependent public class lazily."""
    if name == "ShardedMarkovSampler":
        from kernels.markov_sharded.host import ShardedMarkovSampler

        return ShardedMarkovSampler
    raise AttributeError(name)


__all__ = ["ShardedMarkovSampler"]
