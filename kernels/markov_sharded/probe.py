"""A probe of the sharded sampler's bias MMA chain, for checking its accumulation model on a GPU.

``MmaChainProbe``: grid ``(tiles, sets)``, one warp per CTA. CTA ``(tile,
set)`` stages embedding set ``set`` (BF16 ``[8, 256]``) in shared memory,
loads the lane's fragments of head tile ``tile`` (BF16 rows ``[16 tile, 16
tile + 16)`` of ``[16 tiles, 256]``) exactly as ``ShardedMarkovSample`` holds
its resident tile, runs the kernel's own chain (``head_tile.tile_bias``:
16 ``mma.sync.m16n8k16`` from a +0.0 accumulator, k groups of
``golden.mma_bias.mma_k_groups``) and stores the FP32 sums to ``out
[sets, 8, 16 tiles]`` (request row, head row). The golden side is
``golden.mma_bias.mma_chain_bias(embeds[set], head)``.

Layouts: every tensor contiguous and 16-byte aligned; the head row and the
embedding row are 512 bytes.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass import Int32, Int64
from cutlass.memory import SmemAllocator

from kernels import ptx
from kernels.compile import compiled
from kernels.variant import KernelVariant
from kernels.markov_common.head_tile import tile_bias
from kernels.markov_sharded.layout import CHUNKS, HEAD_DIM, MAX_ROWS, ROW_BYTES, TILE_ROWS, WARP

class MmaChainProbe(KernelVariant):
    """Grid (tiles, sets), 32 threads: ``out[set, r, v] = chain(embeds[set, r], head[v])``."""

    def key(self) -> tuple:
        """The kernel's one configuration (and its symbol)."""
        return ("MmaChainProbe",)

    @cute.jit
    def __call__(self, head: Int64, embeds: Int64, out: Int64, tiles: Int32, sets: Int32, stream: cuda.CUstream):
        self.kernel(head, embeds, out, tiles).launch(grid=(tiles, sets, 1), block=(WARP, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, head: Int64, embeds: Int64, out: Int64, tiles: Int32):
        lane, _, _ = cute.arch.thread_idx()
        tile, which, _ = cute.arch.block_idx()
        g = lane // 4
        t = lane % 4
        embedding = SmemAllocator().allocate(MAX_ROWS * ROW_BYTES, byte_alignment=16).toint()
        for row in cutlass.range_constexpr(MAX_ROWS):
            source = embeds + (Int64(which) * MAX_ROWS + row) * ROW_BYTES + Int64(lane * 16)
            ptx.st_shared_v4(embedding + row * ROW_BYTES + lane * 16, ptx.ld_global_nc(source, 16, Int32(1)))
        cute.arch.barrier()
        head_row = head + Int64(tile * TILE_ROWS + g) * ROW_BYTES + Int64(t * 16)
        lo = [ptx.ld_global_nc(head_row + chunk * 64, 16, Int32(1)) for chunk in range(CHUNKS)]
        hi = [ptx.ld_global_nc(head_row + 8 * ROW_BYTES + chunk * 64, 16, Int32(1)) for chunk in range(CHUNKS)]
        acc = tile_bias(lambda c: (lo[c], hi[c]), embedding + g * ROW_BYTES + t * 16, HEAD_DIM)
        width = Int64(tiles) * TILE_ROWS
        for col in cutlass.range_constexpr(2):
            for half in cutlass.range_constexpr(2):
                element = (Int64(which) * MAX_ROWS + 2 * t + col) * width + Int64(tile * TILE_ROWS + g + 8 * half)
                ptx.st_global(out + element * 4, [ptx.f32_bits(acc[2 * half + col])], 4, Int32(1))


def _compiled():
    """The probe, compiled once per process (``kernels.compile``)."""
    return compiled(MmaChainProbe(), remedy="run the probe once")


def mma_chain(head: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
    """FP32 ``[sets, 8, n]`` of the kernel's MMA chain for BF16 ``head [n, 256]`` (n a multiple of 16)
    and ``embeds [sets, 8, 256]``, both CUDA tensors."""
    if head.dtype != torch.bfloat16 or head.dim() != 2 or head.shape[1] != HEAD_DIM or head.shape[0] % TILE_ROWS:
        raise ValueError(f"head: expected bf16 [16 k, {HEAD_DIM}], got {head.dtype} {tuple(head.shape)}")
    if embeds.dtype != torch.bfloat16 or embeds.dim() != 3 or embeds.shape[1:] != (MAX_ROWS, HEAD_DIM):
        raise ValueError(f"embeds: expected bf16 [sets, {MAX_ROWS}, {HEAD_DIM}], got {embeds.dtype} {tuple(embeds.shape)}")
    head, embeds = head.contiguous(), embeds.contiguous()
    tiles, sets = head.shape[0] // TILE_ROWS, embeds.shape[0]
    out = torch.empty((sets, MAX_ROWS, head.shape[0]), dtype=torch.float32, device=head.device)
    stream = cuda.CUstream(torch.cuda.current_stream(head.device).cuda_stream)
    _compiled()(Int64(head.data_ptr()), Int64(embeds.data_ptr()), Int64(out.data_ptr()), Int32(tiles), Int32(sets), stream)
    return out


__all__ = ["MmaChainProbe", "mma_chain"]
