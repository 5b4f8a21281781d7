"""Constants and host-side variant rules of the fused Markov draft loop (``kernels.markov_fused.host``).

Nothing here touches a GPU or CuTe DSL: the device kernels
(``kernel.py``) and the host class (``host.py``) both take their
sizes from these constants, and the host picks a compile-time variant with
these rules from the addresses and strides of a call, so tests check them on
a CPU.

Sizes. A step CTA is ``THREADS`` (128) threads covering ``block`` vocab
entries (one of ``BLOCK_SIZES``), ``block / 128`` BF16 elements (2 bytes
each) per thread; the pick is one warp (``PICK_THREADS``); the cache fill
moves ``FILL_BLOCK`` entries per CTA, 8 per thread. ``NEG_INF_BITS`` and
``BIG_INDEX`` are the (score bits, id) a missing argmax candidate loads as,
so it never wins. The seed takes any power of two from 128 as ``block``;
``BLOCK_SIZES`` stops at 4096 (32 elements a thread: 96-128 registers on
sm_90a, no spills), since 8192 already needs 231-255 of the 255 registers
a thread can have.

Access widths (bytes), seed 001's public rules. An ``Operand`` is where a
BF16 operand lies (byte address, element strides). A step moves a thread's
elements as one access when they span 8 or 16 bytes (``vector_bytes``:
blocks 512 and 1024) and its base, bias and cache operands keep them aligned
(``vectorized``); the cache fill copies 16-byte vectors when every size,
stride and pointer is a multiple of 8 elements / 16 bytes
(``fill_vectorized``); a row copy of ``w1`` into ``emb`` uses the widest
power-of-two access up to 16 bytes that a thread's share of the row and
every row tensor's alignment allow (``copy_chunk``; it also divides the row
bytes, which the seed's power-of-two rows always do).

Phase stamps (a bench-only step variant, ``stamps=True``). The step's int64
scratch ``block_argmax`` (``rows * blocks`` slots) is then followed, in the
same allocation, by ``[steps][rows * blocks][STEP_STAMPS]`` ``%globaltimer``
values (``step_scratch_slots``); ``step_stamp_names`` names one CTA slot's
stamps over a call, step by step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

THREADS = 128
WARP = 32
PICK_THREADS = 32
FILL_BLOCK = 1024
VECTOR_BYTES = 16
NEG_INF_BITS = 0xFF800000
BIG_INDEX = 0x7FFFFFFF
BLOCK_SIZES = (128, 256, 512, 1024, 2048, 4096)


def vector_bytes(block: int) -> int:
    """Bytes of one thread's ``block / 128`` elements if a step may move them
    as one 8- or 16-byte access, else 0."""
    nbytes = block // THREADS * 2
    return nbytes if 8 <= nbytes <= VECTOR_BYTES else 0


class Operand(NamedTuple):
    """Where a BF16 operand of a step or cache fill lies: its byte address and element strides (``vectorized``)."""

    address: int
    strides: tuple[int, ...]

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "Operand":
        """The operand of a BF16 tensor: its data pointer and strides."""
        if tensor.dtype != torch.bfloat16:
            raise ValueError(f"Operand.of: expected a BF16 tensor, got {tensor.dtype}")
        return cls(tensor.data_ptr(), tuple(tensor.stride()))


def vectorized(block: int, *, width: int, col: int, base: Operand, bias: Operand, cache: Operand) -> bool:
    """Whether a step at ``block`` reads and writes its base, bias and cache rows a thread's ``block / 128``
    elements at a time: every group then starts aligned to its bytes (the operands' addresses, row strides and
    step ``col``'s offset in the cache) and lies wholly inside or outside the width; the values are the same
    either way."""
    nbytes = vector_bytes(block)
    per_thread = nbytes // 2
    return (
        nbytes > 0
        and width % per_thread == 0
        and all(t.address % nbytes == 0 and t.strides[0] % per_thread == 0 for t in (base, bias, cache))
        and col * cache.strides[1] % per_thread == 0
    )


def fill_vectorized(*, gathered: int, src_s0: int, cache: Operand, shard: int, vocab: int) -> bool:
    """Whether the cache fill copies 16-byte vectors: the shard, the vocab, the strides and the pointers
    (``gathered`` the address of the gathered logits) all multiples of 8 elements / 16 bytes."""
    return (
        shard % 8 == 0
        and vocab % 8 == 0
        and src_s0 % 8 == 0
        and cache.strides[0] % 8 == 0
        and cache.strides[1] % 8 == 0
        and gathered % VECTOR_BYTES == 0
        and cache.address % VECTOR_BYTES == 0
    )


def finish_warps(blocks: int) -> int:
    """Warps of a step's last CTA that reduce the ``blocks`` results: warp 0
    up to four results per lane, else all four warps."""
    return 1 if blocks <= 4 * WARP else THREADS // WARP


def copy_chunk(row_bytes: int, threads: int, *tensors: Any) -> int:
    """Bytes per access of a row copy by ``threads`` threads: the largest power of two up to 16 that is no more
    than a thread's share (at least 2), divides the row bytes and every tensor's data pointer (``data_ptr()``)."""
    chunk = 2
    while chunk < VECTOR_BYTES and row_bytes % (chunk * 2) == 0 and chunk * 2 * threads <= row_bytes:
        chunk *= 2
    while any(t.data_ptr() % chunk for t in tensors):
        chunk //= 2
    return chunk


# A step CTA's stamps, each ending a phase (``kernel.StepKernel``'s docstring).
STEP_STAMPS = ("between", "ready", "scored", "arrived", "finish")


def step_stamp_names(steps: int) -> tuple[str, ...]:
    """The stamps of one step CTA slot over a call of ``steps`` steps: ``s<i>.<name>`` of ``STEP_STAMPS``."""
    return tuple(f"s{i}.{name}" for i in range(steps) for name in STEP_STAMPS)


def step_scratch_slots(rows: int, blocks: int, steps: int, stamps: bool) -> int:
    """int64 slots of a call's ``block_argmax`` scratch: ``rows * blocks``, then the stamps of a stamped step."""
    slots = rows * blocks
    return slots * (1 + steps * len(STEP_STAMPS)) if stamps else slots
