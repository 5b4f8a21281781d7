"""Named groups of the all-reduce kernels' raw-address arguments.

A kernel's ``@cute.kernel`` takes these ``NamedTuple``s where its flat list
of 64-bit addresses and scalars had several arguments that always travel
together; CuTe DSL flattens a tuple argument into its fields, in order, so
the kernel parameters (and the PTX) keep the flat list's order. The host
calls ``__call__`` with the flat arguments, unchanged; ``__call__`` builds
the groups. The fields are addresses (``Int64``) into the caller's tensors
or the fabric's buffers, or scalars, exactly as in the flat lists.
"""

from __future__ import annotations

from typing import NamedTuple

from cutlass import Int32, Int64


class WaitDeadline(NamedTuple):
    """What a mailbox wait needs to give up: its deadline, and where and as whom it reports a timeout."""

    timeout_ns: Int64  # 0: wait forever
    diag: Int64  # kernels.diag record (pinned host memory) or 0
    rank: Int32
    launch: Int32


class TokenInputs(NamedTuple):
    """The consumer's per-token inputs: the residual streams, the mHC mixes and the norm weight."""

    residual: Int64  # BF16 [M, hc, H]
    post: Int64  # FP32 [M, hc]
    comb: Int64  # FP32 [M, hc, hc]
    pre: Int64  # FP32 [M, hc]
    weight: Int64  # BF16 [H]


class TokenOutputs(NamedTuple):
    """The consumer's outputs: the new residual streams, the normalized row and its MXFP8 form."""

    residual_out: Int64  # BF16 [M, hc, H]
    norm_out: Int64  # BF16 [M, H] (or 0: residual only)
    mx_values: Int64  # E4M3 [M, H] (or 0)
    mx_scales: Int64  # UE8M0, swizzled 128x4 tiles (or 0)


__all__ = ["TokenInputs", "TokenOutputs", "WaitDeadline"]
