"""Named groups of the Markov kernels' arguments (the fused loop's step kernel, the sharded sampler).

A kernel's ``@cute.kernel`` takes these ``NamedTuple``s where its flat list
of addresses and scalars had arguments that always travel together; CuTe
DSL flattens a tuple argument into its fields, in order, so the kernel
parameters (and the PTX, apart from the kernel's symbol name) keep the flat
list's order. The host calls ``__call__`` with the flat arguments,
unchanged, and ``__call__`` builds the groups. Addresses are raw 64-bit
device addresses of the caller's tensors or of the host class's own
buffers; strides are in elements.
"""

from __future__ import annotations

from typing import NamedTuple

from cutlass import Float32, Int64


class Rows(NamedTuple):
    """A tensor read or written a row at a time: its address and its row stride (elements)."""

    address: Int64
    row_stride: Int64


class BaseLogits(NamedTuple):
    """The sampler's base logits ``[rows, steps, vocab or vocab_local]``: address, strides, this rank's first column."""

    address: Int64
    row_stride: Int64
    step_stride: Int64
    column: Int64


class LogitsCache(NamedTuple):
    """The sampler's cache ``[max_reqs, steps, vocab]`` (vocab stride 1): address and the two outer strides."""

    address: Int64
    request_stride: Int64
    step_stride: Int64


class BlockResults(NamedTuple):
    """What each CTA of a step leaves for the row's last CTA (owned by ``MarkovKernels``)."""

    block_argmax: Int64  # int64 [rows, blocks]: the block's winning global vocab id (and the stamps, when on)
    block_max: Int64  # FP32 bits [rows, blocks]: its score
    arrivals: Int64  # int32 [rows]: the arrival count


class Winner(NamedTuple):
    """Where the row's last CTA puts the step's winner: token and next embedding, or the packet (sharded)."""

    tokens: Int64  # int64 [rows, steps], stride tokens_stride
    tokens_stride: Int64
    w1: Int64  # BF16 [V, R]
    emb: Int64  # BF16 [rows, R]
    packets: Int64  # int32 [rows, 4] (sharded)


class LogitTransform(NamedTuple):
    """The output transform's scalars: ``* mult``, and the soft cap ``cap * tanhf(x * inv_cap)``."""

    mult: Float32
    inv_cap: Float32
    cap: Float32


__all__ = ["BaseLogits", "BlockResults", "LogitTransform", "LogitsCache", "Rows", "Winner"]
