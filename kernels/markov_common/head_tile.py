"""The Markov head tile times eight embeddings: the MMA chain both Markov head kernels share.

A head tile is 16 consecutive rows of a BF16 ``[n, dim]`` head (``2 dim``
bytes a row). Lane ``4 g + t`` of a warp holds rows g and g + 8, 16 bytes at
k = ``32 chunk + 8 t`` of each of the ``dim / 32`` chunks: its A fragments.
The eight request rows' embeddings sit in shared memory (``[8][dim]`` BF16)
and are the eight columns of ``mma.sync.m16n8k16`` (BF16 in, FP32
accumulate): MMA ``2 chunk + h`` covers k = ``{32 chunk + 8 t + 4 h + j}``,
chained in that order from a +0.0 accumulator
(``golden.mma_bias.mma_k_groups``, whose H200 arithmetic is
``hopper_mma_bias``). Lane (g, t) ends with the FP32 sums of head rows g,
g + 8 for request rows 2t, 2t + 1, as ``acc[2 half + column]``.

A tile that is not held in registers is streamed into a warp's buffer in
shared memory with ``cp.async`` (``copy_tile``): slot ``2 chunk + half`` of
``STREAM_SLOT_BYTES`` holds every lane's 16 bytes of that chunk and row half
(lane at ``16 lane``), so each lane copies exactly the fragments it reads
back and ``cp.async.wait_group`` alone orders the two (no barrier).
"""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32

from kernels import ptx

TILE_ROWS = 16
WARP = 32
VECTOR_BYTES = 16
# One (chunk, half) slot of a warp's stream buffer: 32 lanes x 16 bytes.
STREAM_SLOT_BYTES = WARP * VECTOR_BYTES


def check_l2_keep(l2_keep) -> float:
    """``l2_keep`` as a float, or ``ValueError`` unless it is a fraction in [0, 1] (not a bool)."""
    if isinstance(l2_keep, bool) or not isinstance(l2_keep, (int, float)) or not 0.0 <= l2_keep <= 1.0:
        raise ValueError(f"l2_keep: expected a float in [0, 1], got {l2_keep!r}")
    return float(l2_keep)


def bf16_bits(value: Float32) -> Uint32:
    """``cvt.rn.bf16.f32`` of ``value``, its 16 bits in the low half."""
    return ptx.cvt_rn_bf16x2_f32(Float32(0.0), value) & Uint32(0xFFFF)


def thread_coordinates() -> tuple:
    """The thread's ``(thread, cta, ctas, warp, lane, g, t)``: its index, the grid's, and its place
    ``lane = 4 g + t`` in the MMA fragments."""
    thread, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    ctas, _, _ = cute.arch.grid_dim()
    lane = thread % WARP
    return thread, cta, ctas, thread // WARP, lane, lane // 4, lane % 4


def stream_bytes(dim: int) -> int:
    """Bytes of one streamed tile in a warp's buffer: ``dim / 16`` slots (16 rows x ``dim`` BF16)."""
    return (dim // 16) * STREAM_SLOT_BYTES


def copy_tile(head: Int64, tile: Int32, g: Int32, t: Int32, lane_slot: Int32, dim: int, policy=None) -> None:
    """Issue the ``dim / 16`` ``cp.async`` copies of the lane's fragments of head tile ``tile`` into its
    slots of a warp buffer (``lane_slot`` = buffer + 16 lane), with the L2 ``policy`` if given, as one group."""
    row_bytes = 2 * dim
    row = head + Int64(tile * TILE_ROWS + g) * row_bytes + Int64(t * VECTOR_BYTES)
    for chunk in range(dim // 32):
        for half in range(2):
            ptx.cp_async_16(lane_slot + (2 * chunk + half) * STREAM_SLOT_BYTES,
                            row + (half * 8 * row_bytes + chunk * 64), policy)
    ptx.cp_async_commit()


def slot_fragment(lane_slot: Int32, chunk) -> tuple[list, list]:
    """The lane's (row g, row g + 8) four words of ``chunk`` from its slots of a warp buffer."""
    return (ptx.ld_shared_v4(lane_slot + (2 * chunk) * STREAM_SLOT_BYTES),
            ptx.ld_shared_v4(lane_slot + (2 * chunk + 1) * STREAM_SLOT_BYTES))


def chunk_mma(acc: list, lo: list, hi: list, embedding_row: Int32, chunk) -> list:
    """``acc`` after chunk ``chunk``'s two chained MMAs of the lane's fragments (``lo``: row g, ``hi``: row g + 8)
    with the embeddings at ``embedding_row`` (the lane's row g, 16 bytes at ``16 t``)."""
    x = ptx.ld_shared_v4(embedding_row + chunk * 64)
    acc = ptx.mma_m16n8k16_bf16(acc, [lo[0], hi[0], lo[1], hi[1]], [x[0], x[1]])
    return ptx.mma_m16n8k16_bf16(acc, [lo[2], hi[2], lo[3], hi[3]], [x[2], x[3]])


def tile_bias(fragment, embedding_row: Int32, dim: int) -> list:
    """The FP32 C fragment of a tile times the eight embeddings: ``dim / 16`` chained MMAs, unrolled;
    ``fragment(chunk)`` gives the lane's (row g, row g + 8) four words of that chunk."""
    acc = [Float32(0.0)] * 4
    for chunk in range(dim // 32):
        lo, hi = fragment(chunk)
        acc = chunk_mma(acc, lo, hi, embedding_row, chunk)
    return acc


__all__ = ["STREAM_SLOT_BYTES", "TILE_ROWS", "bf16_bits", "check_l2_keep", "chunk_mma", "copy_tile", "slot_fragment", "stream_bytes", "thread_coordinates",
           "tile_bias"]
