"""Constants and host-side variant rules of the fused Markov draft loop (``kernels.markov.fused``).

Nothing here touches a GPU or CuTe DSL: the device kernels
(``fused_kernels.py``) and the host class (``fused.py``) both take their
sizes from these constants, and the host picks a compile-time variant with
these rules from the addresses and strides of a call, so tests check them on
a CPU.

Sizes. A step CTA is ``THREADS`` (128) threads covering ``block`` vocab
entries (one of ``BLOCK_SIZES``), ``block / 128`` BF16 elements (2 bytes
each) per thread; the pick is one warp (``PICK_THREADS``); the cache fill
moves ``FILL_BLOCK`` entries per CTA, 8 per thread. ``NEG_INF_BITS`` and
``BIG_INDEX`` are the (score bits, id) a missing argmax candidate loads as,
so it never wins.

Access widths (bytes). A step moves a thread's elements as one access when
they span 8 or 16 bytes (``vector_bytes``: blocks 512 and 1024) and every
operand keeps them aligned (``step_vectorized``); the cache fill copies
16-byte vectors when every size, stride and pointer is a multiple of 8
elements / 16 bytes (``fill_vectorized``); a row copy of ``w1`` into ``emb``
uses the widest power-of-two access up to 16 bytes that the row and both
pointers allow (``copy_chunk``).

Phase stamps (a bench-only step variant, ``stamps=True``). The step's int64
scratch ``block_argmax`` (``rows * blocks`` slots) is then followed, in the
same allocation, by ``[steps][rows * blocks][STEP_STAMPS]`` ``%globaltimer``
values (``step_scratch_slots``); ``step_stamp_names`` names one CTA slot's
stamps over a call, step by step.
"""

from __future__ import annotations

from typing import Iterable

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


def step_vectorized(block: int, width: int, operands: Iterable[tuple[int, int]]) -> bool:
    """Whether a step at ``block`` reads and writes its rows a thread's
    elements at a time: every ``(address, row stride)`` operand keeps each
    group aligned to its bytes and the width holds whole groups."""
    nbytes = vector_bytes(block)
    if nbytes == 0:
        return False
    per_thread = nbytes // 2
    return width % per_thread == 0 and all(
        address % nbytes == 0 and stride % per_thread == 0 for address, stride in operands
    )


def fill_vectorized(shard: int, vocab: int, src: int, src_s0: int, cache: int, cache_strides: tuple[int, int]) -> bool:
    """Whether the cache fill copies 16-byte vectors: shard, vocab, strides and
    pointers all multiples of 8 elements / 16 bytes."""
    return (
        shard % 8 == 0
        and vocab % 8 == 0
        and src_s0 % 8 == 0
        and all(s % 8 == 0 for s in cache_strides)
        and src % 16 == 0
        and cache % 16 == 0
    )


def finish_warps(blocks: int) -> int:
    """Warps of a step's last CTA that reduce the ``blocks`` results: warp 0
    up to four results per lane, else all four warps."""
    return 1 if blocks <= 4 * WARP else THREADS // WARP


def copy_chunk(row_bytes: int, threads: int, addresses: Iterable[int]) -> int:
    """Bytes per access of a row copy by ``threads`` threads: the largest
    power of two up to 16 that divides the row bytes and every address, and
    is no more than a thread's share (at least 2)."""
    chunk = 2
    while chunk < VECTOR_BYTES and row_bytes % (chunk * 2) == 0 and chunk * 2 * threads <= row_bytes:
        chunk *= 2
    for address in addresses:
        while address % chunk:
            chunk //= 2
    return chunk


# A step CTA's stamps, each ending a phase (``fused_kernels.StepKernel``'s docstring).
STEP_STAMPS = ("between", "ready", "scored", "arrived", "finish")


def step_stamp_names(steps: int) -> tuple[str, ...]:
    """The stamps of one step CTA slot over a call of ``steps`` steps: ``s<i>.<name>`` of ``STEP_STAMPS``."""
    return tuple(f"s{i}.{name}" for i in range(steps) for name in STEP_STAMPS)


def step_scratch_slots(rows: int, blocks: int, steps: int, stamps: bool) -> int:
    """int64 slots of a call's ``block_argmax`` scratch: ``rows * blocks``, then the stamps of a stamped step."""
    slots = rows * blocks
    return slots * (1 + steps * len(STEP_STAMPS)) if stamps else slots
