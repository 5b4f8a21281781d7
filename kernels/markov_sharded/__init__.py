"""Seed 000's sharded Markov sampler: every kernel module of the ``markov_sharded`` family.

Modules: ``host`` (``ShardedMarkovSampler``, the seed's public API, and
``compile_variants`` for the compile gate), ``kernel`` (the cooperative
kernel ``ShardedMarkovSample``), ``layout`` (buffer layout, keys and tags,
pure Python), ``checks`` (the host checks of config and call) and ``probe``
(a probe of the kernel's bias MMA chain on a GPU). The head tile and the
argument groups come from ``kernels.markov_common``.

Its flight-recorder identity (``kernels.flight``): family code 1, one
kernel, sample. ``ShardedMarkovSampler`` is imported on first use
(``kernels.lazy_export``).
"""

from __future__ import annotations

from kernels.lazy_export import lazy_exports

FLIGHT_CODE = 1
FLIGHT_KERNELS = ("sample",)

__getattr__ = lazy_exports({"ShardedMarkovSampler": "kernels.markov_sharded.host"})


__all__ = ["ShardedMarkovSampler"]
