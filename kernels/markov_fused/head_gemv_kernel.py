"""The Markov head GEMV ``bias = emb @ head^T`` as one CuTe DSL kernel (the caller's GEMV of seed 001's loop).

For request row r < rows (at most 8) and head row v < n (a multiple of 16)::

    bias[r, v] = cvt.rn.bf16(acc[r, v])

with ``acc`` the chain of ``dim / 16`` ``mma.sync.m16n8k16`` (BF16 in, FP32
accumulate) of ``kernels.markov_common.head_tile`` from +0.0: the sharded
sampler's tile arithmetic, so the bits are ``golden.markov_fused.mma_bias``
(``golden.mma_bias.hopper_mma_bias`` rounded to BF16) on the H200.
The seed's contract leaves the GEMV to the caller; this is the caller's
fast one, and its order is fixed, so a golden loop reproduces it.

Work split. The grid is persistent: ``ctas`` CTAs of 8 warps (one per SM),
warp w of CTA c takes head tiles ``c * 8 + w``, then every ``8 ctas``-th.
Each warp streams its tiles through two buffers in shared memory with
``cp.async`` (``head_tile.copy_tile``): tile i's MMAs read one buffer while
tile i + 1's copies land in the other, and the copy of tile i + 2 is issued
into the first as soon as the MMAs have read it (in-order issue: they
waited for its loads), so two tiles (16 KB at dim 256) are in flight per
warp. One copy group is committed per tile, empty past the last, so
``cp.async.wait_group 1`` always means "the oldest tile landed".

Shared memory per CTA (bytes): the eight embedding rows ``[8][dim]`` BF16
(``16 dim``; zeros past ``rows``), then the warps' buffers ``[8][2][dim /
16 slots][32 lanes][16]`` (``512 dim``): 135168 at dim 256.

Ordering. The head is an input no grid writes: each warp's first two tiles
are requested before ``griddepcontrol.wait`` (PDL variant), overlapping the
previous kernel's tail. ``emb`` is the previous kernel's output (the anchor
or the step): read after the wait with weak ``ld.global``. The CTA then
calls ``griddepcontrol.launch_dependents``: the next kernel (the step, with
PDL) may start its own input reads, and its ``griddepcontrol.wait`` still
waits for this grid's completion and its stores. The bias goes out with
weak 2-byte stores.

L2. The head is read once per step, the same rows at every step, and the
H200's L2 (60 MiB) holds most of a 66 MB head: a fraction ``l2_keep`` of
the copies carries an ``evict_last`` policy (the rest ``evict_first``), so
those rows are still in L2 at the next step's GEMV.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr
from cutlass.memory import SmemAllocator

from kernels import ptx
from kernels.markov_common.head_tile import (TILE_ROWS, VECTOR_BYTES, WARP, bf16_bits, check_l2_keep, copy_tile,
                                     slot_fragment, stream_bytes, thread_coordinates, tile_bias)
from kernels.variant import KernelVariant

# The buffers take 512 dim bytes of a CTA's shared memory (shared_bytes): the widest row the kernel takes,
# and the most rows of one call.
MAX_DIM = 384
MAX_ROWS = 8
WARPS = 8
THREADS = WARPS * WARP
BUFFERS = 2


def shared_bytes(dim: int) -> int:
    """Shared memory of one CTA at ``dim``: the embeddings and every warp's buffers."""
    return MAX_ROWS * dim * 2 + WARPS * BUFFERS * stream_bytes(dim)


class HeadGemvKernel(KernelVariant):
    """``bias = bf16(emb @ head^T)`` for at most 8 rows of width ``dim`` (a multiple of 32, at most
    ``MAX_DIM``); see the module docstring. ``l2_keep``: the fraction of head copies marked
    ``evict_last`` (0: no policy); ``pdl``: launched with programmatic dependent launch."""

    def __init__(self, dim: int, *, l2_keep: float = 0.0, pdl: bool = False) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim % 32 or not 32 <= dim <= MAX_DIM:
            raise ValueError(f"dim: expected a multiple of 32 in [32, {MAX_DIM}], got {dim!r}")
        if not isinstance(pdl, bool):
            raise TypeError(f"pdl: expected a bool, got {pdl!r}")
        self.dim, self.l2_keep, self.pdl = dim, check_l2_keep(l2_keep), pdl
        self.tile_bytes = stream_bytes(dim)

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_head_gemv", f"d{self.dim}", f"keep{round(self.l2_keep * 100)}",
                "pdl" if self.pdl else "nopdl")

    @cute.jit
    def __call__(
        self,
        emb: Int64,  # BF16 [rows, dim], contiguous
        head: Int64,  # BF16 [n, dim], contiguous, 16-byte aligned
        bias: Int64,  # BF16 [rows, n] rows of bias_stride elements, vocab stride 1
        bias_stride: Int64,
        rows: Int32,
        n: Int32,
        ctas: Int32,
        stream: cuda.CUstream,
    ):
        """Launch the GEMV as ``ctas`` CTAs of 256 threads."""
        self.kernel(emb, head, bias, bias_stride, rows, n).launch(
            grid=(ctas, 1, 1), block=(THREADS, 1, 1), stream=stream, use_pdl=self.pdl)

    def _store_bf16(self, bias: Int64, bias_stride: Int64, r, v, value, live) -> None:
        """``cvt.rn.bf16`` of ``value`` into ``bias[r, v]`` if ``live``."""
        ptx.st_global(bias + (Int64(r) * bias_stride + Int64(v)) * 2, [bf16_bits(value)], 2, live)

    @cute.kernel
    def kernel(self, emb: Int64, head: Int64, bias: Int64, bias_stride: Int64, rows: Int32, n: Int32):
        """One CTA of 8 warps; see the module docstring."""
        dim, tile_bytes = self.dim, self.tile_bytes
        thread, cta, ctas, warp, lane, g, t = thread_coordinates()
        tiles = n // TILE_ROWS
        stride = ctas * WARPS
        first = cta * WARPS + warp

        smem = SmemAllocator()
        embedding = smem.allocate(MAX_ROWS * dim * 2, byte_alignment=16).toint()
        buffers = smem.allocate(WARPS * BUFFERS * tile_bytes, byte_alignment=128).toint()
        lane_slot = buffers + warp * BUFFERS * tile_bytes + lane * VECTOR_BYTES
        policy = ptx.l2_evict_last_policy(self.l2_keep) if self.l2_keep > 0.0 else None

        for buffer in cutlass.range_constexpr(BUFFERS):
            tile = first + buffer * stride
            if tile < tiles:
                copy_tile(head, tile, g, t, lane_slot + buffer * tile_bytes, dim, policy)
            else:
                ptx.cp_async_commit()
        if const_expr(self.pdl):
            cute.arch.griddepcontrol_wait()
        vectors_per_row = dim * 2 // VECTOR_BYTES
        for vector in cutlass.range(thread, MAX_ROWS * vectors_per_row, THREADS, unroll=1):
            live = Int32(vector // vectors_per_row < rows)
            words = ptx.ld_global(emb + Int64(vector) * VECTOR_BYTES, VECTOR_BYTES, live)
            ptx.st_shared_v4(embedding + vector * VECTOR_BYTES, words)
        cute.arch.barrier()
        if const_expr(self.pdl):
            cute.arch.griddepcontrol_launch_dependents()

        embedding_row = embedding + g * (dim * 2) + t * VECTOR_BYTES
        for tile in cutlass.range(first, tiles, stride, unroll=1):
            slot = lane_slot + ((tile - first) // stride % BUFFERS) * tile_bytes
            ptx.cp_async_wait(BUFFERS - 1)
            acc = tile_bias(lambda chunk: slot_fragment(slot, chunk), embedding_row, dim)
            following = tile + BUFFERS * stride
            if following < tiles:
                copy_tile(head, following, g, t, slot, dim, policy)
            else:
                ptx.cp_async_commit()
            v = tile * TILE_ROWS + g
            for half in cutlass.range_constexpr(2):
                for column in cutlass.range_constexpr(2):
                    r = 2 * t + column
                    self._store_bf16(bias, bias_stride, r, v + 8 * half, acc[2 * half + column], Int32(r < rows))


__all__ = ["HeadGemvKernel", "shared_bytes"]
