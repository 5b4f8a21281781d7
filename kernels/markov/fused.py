"""Seed 001: the fused DSpark Markov draft loop in CuTe DSL.

One call drafts ``steps`` tokens for ``rows`` request rows. Per step the
bias GEMV ``bias = emb @ w2_shard^T`` runs outside these kernels (the loop
takes it as a callable), then:

- ``AnchorKernel`` (once per call), grid ``(rows,)``, 128 threads:
  ``emb[r] = w1[input_ids[anchor_idx[r]]]`` and ``arrivals[r] = 0``.
- ``StepKernel``, grid ``(rows, blocks)``, 128 threads, ``block`` vocab
  entries per CTA: the output transform of BF16 base and bias (``add.bf16``,
  ``* mult``, optional soft cap ``cap * tanhf(x * inv_cap)``, BF16), the
  cache store of those BF16 bits, the Gumbel noised score (temperature != 0)
  or the plain logit (greedy), the block's argmax; the CTA that completes
  the row's arrival count reduces every block's result and writes the token
  and the next ``emb`` row (unsharded), or a packet (sharded).
- ``PickKernel`` (sharded), grid ``(rows,)``, one warp: the winner over the
  gathered ``[tp, rows, 4]`` packets, its token and ``emb`` row.
- ``CacheFillKernel`` (sharded, after the loop), grid ``(rows * steps,
  ceil(V / 1024))``: scatter of the gathered ``[tp, rows, steps, shard]``
  draft logits into ``cache[idx_map[r, i], i, :]``, skipping negative rows.

Layouts (bytes). ``w1``, ``w2``: BF16 ``[V, R]`` row-major (a row is
``2R`` bytes). ``base``: BF16 ``[rows, steps, V]``, the vocab dimension of
stride 1, any row/step strides. ``cache``: BF16 ``[max_reqs, steps, V]``,
vocab stride 1. ``emb``: BF16 ``[rows, R]`` contiguous (owned here).
``block_argmax`` int64 / ``block_max`` FP32 bits ``[rows, blocks]`` (owned
here). ``arrivals`` int32 ``[rows]`` (owned here). ``packets`` int32
``[rows, 4]`` = (FP32 bits of the winning score, global vocab id, 0, 0),
16-byte aligned. ``draft`` (sharded) BF16 ``[rows, steps, V / tp]``.

Memory ordering. Inputs no running grid writes (base, ids, anchors,
positions, seeds, temperatures, weights, the gathered shards of the fill)
are read through ``ld.global.nc``; what the immediately preceding kernel
writes (the bias from the GEMV, the gathered packets of the pick) is read
with weak ``ld.global``, after ``griddepcontrol.wait`` when launched with
PDL (before the wait such a grid reads only inputs and stores nothing). Each CTA of a step stores its (score, id) with weak
stores, then thread 0 does ``atom.add.acq_rel.gpu`` on the row's arrival
counter after a ``bar.sync``: the release publishes the CTA's result, and the
CTA whose ticket completes a multiple of ``blocks`` acquires every earlier
CTA's, which its warps then read with ``ld.volatile``. The anchor resets the
counters at every call, so the count runs from zero per call.

Arithmetic (bit for bit the golden loop, ``golden/markov_fused.py``): every
argmax takes the first NaN, else the first maximum, by global vocab id: a
total order, so block size, vocab shard and reduction tree never change the
token. The instruction sequences live in ``kernels/ptx.py``.

Variants (compile-time): block size, PDL on/off (step and pick), vector vs
scalar access (vector where every operand pointer, row stride and the width
keep a thread's elements in one aligned 8- or 16-byte access; else scalar),
sharded or not, soft cap on/off, tp of the pick. ``FusedMarkovLoop``
compiles what a configuration needs when built (never under CUDA graph
capture), caches compiled kernels by configuration and validates every
argument before its first launch.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass import Float32, Int32, Int64, Uint32, const_expr
from cutlass.memory import SmemAllocator

from kernels import ptx
from kernels.compile_clock import compiling
from kernels.variant import KernelVariant

SYSTEM_CLASS = "FusedMarkovLoop"
THREADS = 128
WARP = 32
PICK_THREADS = 32
FILL_BLOCK = 1024
VECTOR_BYTES = 16
NEG_INF_BITS = 0xFF800000
BIG_INDEX = 0x7FFFFFFF
BLOCK_SIZES = (128, 256, 512, 1024, 2048, 4096)


class CaptureError(RuntimeError):
    """A kernel variant would have to compile while a CUDA graph is being captured."""


# ---------------------------------------------------------------------------
# Host-side variant rules
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Traced helpers (plain functions: Python loops unroll at trace time)
# ---------------------------------------------------------------------------


def _copy_row(source, destination, tidx, threads: int, row_bytes: int, chunk: int) -> None:
    """Copy ``row_bytes`` from a read-only row with ``threads`` threads in
    ``chunk``-byte accesses, every load issued before the first store."""
    per_pass = threads * chunk
    passes = -(-row_bytes // per_pass)
    loaded = []
    for rep in range(passes):
        offset = Int64(tidx * chunk) + rep * per_pass
        if (rep + 1) * per_pass <= row_bytes:
            keep = Int32(1)
        else:
            keep = Int32(offset < Int64(row_bytes))
        loaded.append((offset, keep, ptx.ld_global_nc(source + offset, chunk, keep)))
    for offset, keep, words in loaded:
        ptx.st_global(destination + offset, words, chunk, keep)


def _tree_argmax(pairs: list, combine) -> tuple:
    """The first NaN, else the first maximum, of (value, index) pairs, reduced
    pairwise level by level (``combine`` is the in-order one when the pairs
    are in index order)."""
    while len(pairs) > 1:
        pairs = [
            combine(*pairs[j], *pairs[j + 1]) if j + 1 < len(pairs) else pairs[j]
            for j in range(0, len(pairs), 2)
        ]
    return pairs[0]


def _warp_argmax(value, index, top: int) -> tuple:
    """Butterfly over lane masks ``top, top/2, ..., 1``: every lane ends with
    the first NaN, else the first maximum, of the lanes' pairs."""
    mask = top
    while mask >= 1:
        other_v, other_i = ptx.shfl_bfly_pair(value, index, mask)
        value, index = ptx.argmax_combine(value, index, other_v, other_i)
        mask //= 2
    return value, index


def _load_bf16(row, offsets: list, masks: list, vector: bool, nc: bool) -> list:
    """A thread's BF16 elements of a row as 32-bit words (the element in the
    low half): one load each, or with ``vector`` one load of all."""
    load = ptx.ld_global_nc if nc else ptx.ld_global
    if not vector:
        return [load(row + offsets[k], 2, masks[k])[0] for k in range(len(offsets))]
    bits = []
    for word in load(row + offsets[0], len(offsets) * 2, masks[0]):
        bits += [word, word >> Uint32(16)]
    return bits


def _store_bf16(row, offsets: list, stores: list, bits: list, vector: bool) -> None:
    """Store a thread's BF16 elements as ``_load_bf16`` loads them."""
    if not vector:
        for k in range(len(offsets)):
            ptx.st_global(row + offsets[k], [bits[k]], 2, stores[k])
        return
    words = [(bits[j] & Uint32(0xFFFF)) | (bits[j + 1] << Uint32(16)) for j in range(0, len(bits), 2)]
    ptx.st_global(row + offsets[0], words, len(offsets) * 2, stores[0])


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


class AnchorKernel(KernelVariant):
    """Grid (rows,), 128 threads: step 0's Markov embedding (the w1 row of
    each row's anchor token, clamped to the table) and the row's arrival
    count reset."""

    def __init__(self, *, row_bytes: int, chunk: int, w1_rows: int) -> None:
        self.row_bytes, self.chunk, self.w1_rows = row_bytes, chunk, w1_rows

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_anchor", self.row_bytes, self.chunk, self.w1_rows)

    @cute.jit
    def __call__(
        self, input_ids: Int64, id_count: Int64, anchor_idx: Int64, w1: Int64, emb: Int64, arrivals: Int64,
        rows: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(input_ids, id_count, anchor_idx, w1, emb, arrivals).launch(
            grid=(rows, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(self, input_ids: Int64, id_count: Int64, anchor_idx: Int64, w1: Int64, emb: Int64, arrivals: Int64) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        r, _, _ = cute.arch.block_idx()
        row = Int64(r)
        # The host checks anchors; the clamp keeps a bad one inside the ids.
        anchor = ptx.min_u64(ptx.ld_global_nc_b64(anchor_idx + row * 8, Int32(1)), id_count - 1)
        token = Int64(Int32(ptx.ld_global_nc(input_ids + anchor * 4, 4, Int32(1))[0]))
        _copy_row(
            w1 + ptx.min_u64(token, self.w1_rows - 1) * self.row_bytes,
            emb + row * self.row_bytes, tidx, THREADS, self.row_bytes, self.chunk,
        )
        # The step counts the row's arriving CTAs from zero per call.
        ptx.st_global(arrivals + row * 4, [Uint32(0)], 4, Int32(tidx == 0))


class StepKernel(KernelVariant):
    """Grid (rows, blocks), 128 threads, ``block`` vocab entries per CTA; one
    draft step (see the module docstring). ``blocks`` is compile-time."""

    def __init__(
        self, *, block: int, blocks: int, vector: bool, has_cap: bool, sharded: bool, pdl: bool,
        row_bytes: int, chunk: int, w1_rows: int,
    ) -> None:
        if block not in BLOCK_SIZES:
            raise ValueError(f"block must be one of {BLOCK_SIZES}, got {block}")
        if vector and not vector_bytes(block):
            raise ValueError(f"block {block} has no vector access (needs 512 or 1024)")
        self.block, self.blocks, self.vector = block, blocks, vector
        self.per_thread = block // THREADS
        self.finish_warps = finish_warps(blocks)
        self.has_cap, self.sharded, self.pdl = has_cap, sharded, pdl
        self.row_bytes, self.chunk, self.w1_rows = row_bytes, chunk, w1_rows

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_step", self.block, self.blocks, self.vector, self.has_cap, self.sharded, self.pdl,
                self.row_bytes, self.chunk, self.w1_rows)

    @cute.jit
    def __call__(
        self, base: Int64, base_s0: Int64, bias: Int64, bias_s0: Int64, cache: Int64, cache_s0: Int64,
        idx_map: Int64, idx_map_s0: Int64, pos: Int64, pos_s0: Int64, seeds: Int64, temperature: Int64,
        max_reqs: Int64, block_argmax: Int64, block_max: Int64, arrivals: Int64, tokens: Int64,
        tokens_s0: Int64, w1: Int64, emb: Int64, packets: Int64, col: Int32, width: Int32,
        vocab_offset: Int32, mult: Float32, inv_cap: Float32, cap: Float32, rows: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(
            base, base_s0, bias, bias_s0, cache, cache_s0, idx_map, idx_map_s0, pos, pos_s0, seeds,
            temperature, max_reqs, block_argmax, block_max, arrivals, tokens, tokens_s0, w1, emb, packets,
            col, width, vocab_offset, mult, inv_cap, cap,
        ).launch(grid=(rows, self.blocks, 1), block=(THREADS, 1, 1), stream=stream, use_pdl=self.pdl)

    @cute.kernel
    def kernel(
        self, base: Int64, base_s0: Int64, bias: Int64, bias_s0: Int64, cache: Int64, cache_s0: Int64,
        idx_map: Int64, idx_map_s0: Int64, pos: Int64, pos_s0: Int64, seeds: Int64, temperature: Int64,
        max_reqs: Int64, block_argmax: Int64, block_max: Int64, arrivals: Int64, tokens: Int64,
        tokens_s0: Int64, w1: Int64, emb: Int64, packets: Int64, col: Int32, width: Int32,
        vocab_offset: Int32, mult: Float32, inv_cap: Float32, cap: Float32,
    ) -> None:
        block, per_thread = self.block, self.per_thread
        tidx, _, _ = cute.arch.thread_idx()
        r, blk, _ = cute.arch.block_idx()
        warp = tidx // WARP
        smem = SmemAllocator()
        warp_values = smem.allocate(16, byte_alignment=16).toint()
        warp_indices = smem.allocate(16, byte_alignment=16).toint()
        ticket_word = smem.allocate(16, byte_alignment=16).toint()
        row = Int64(r)

        # Element k of this thread: consecutive for one vector access, else
        # strided by 128 so a warp's accesses coalesce; the index rises with
        # k either way, as the in-order combine needs.
        index, gid, mask, offset = [], [], [], []
        for k in cutlass.range_constexpr(per_thread):
            if const_expr(self.vector):
                element = tidx * per_thread + k
            else:
                element = tidx + k * THREADS
            local = blk * block + element
            index.append(Int32(element))
            gid.append(Int32(vocab_offset + local))
            mask.append(Int32(local < width))
            offset.append(Int64(local) * 2)

        # Inputs written before the loop: read while the GEMV may still run.
        a_bits = _load_bf16(base + row * base_s0 * 2, offset, mask, self.vector, True)
        req = ptx.ld_global_nc_b64(idx_map + row * idx_map_s0 * 8, Int32(1))
        position = ptx.ld_global_nc_b64(pos + row * pos_s0 * 8, Int32(1)) - 1
        # A request index outside [0, max_reqs) is padding (the host rejects
        # such indices before launch; this keeps a graph replay in bounds).
        valid = Int32((req >= 0) & (req < max_reqs))
        temp = ptx.f32_from_bits(ptx.ld_global_nc(temperature + req * 4, 4, valid)[0])
        seed = ptx.ld_global_nc_b64(seeds + req * 8, valid)
        if const_expr(self.pdl):
            # The bias is the preceding GEMV's output; every store waits too.
            cute.arch.griddepcontrol_wait()
        b_bits = _load_bf16(bias + row * bias_s0 * 2, offset, mask, self.vector, False)

        values, cache_bits, stores = [], [], []
        for k in cutlass.range_constexpr(per_thread):
            bits, logit = ptx.output_logit(a_bits[k], b_bits[k], mult, inv_cap, cap, mask[k], self.has_cap)
            values.append(logit)
            cache_bits.append(bits)
            stores.append(mask[k] if const_expr(self.sharded) else mask[k] & valid)
        if const_expr(self.sharded):
            cache_row = cache + row * cache_s0 * 2
        else:
            cache_row = cache + req * cache_s0 * 2
        _store_bf16(cache_row, offset, stores, cache_bits, self.vector)

        # Gumbel keys: step seed = seed ^ (col << 32), salted position.
        noisy = ptx.nonzero_f32(temp)
        step_seed = seed ^ (Int64(col) << 32)
        salted = position + (1 << 30)
        prefix = ptx.murmur_prefix(
            Uint32(step_seed & 0xFFFFFFFF), Uint32((step_seed >> 32) & 0xFFFFFFFF), Uint32(salted & 0xFFFFFFFF)
        )
        scores = []
        for k in cutlass.range_constexpr(per_thread):
            noised = ptx.gumbel_score(values[k], temp, prefix, gid[k], mask[k])
            scores.append(ptx.select_f32(noisy, noised, values[k]))

        # The thread's elements, then the warp, then the 4 warps.
        value, idx = _tree_argmax([(scores[k], index[k]) for k in range(per_thread)], ptx.argmax_combine_in_order)
        value, idx = _warp_argmax(value, idx, WARP // 2)
        ptx.st_shared_b32(warp_values + warp * 4, ptx.f32_bits(value))
        ptx.st_shared_b32(warp_indices + warp * 4, Uint32(idx))
        cute.arch.barrier()
        value = ptx.f32_from_bits(ptx.ld_shared_b32(warp_values + (tidx % 4) * 4))
        idx = Int32(ptx.ld_shared_b32(warp_indices + (tidx % 4) * 4))
        value, idx = _warp_argmax(value, idx, 2)
        slot = row * self.blocks + Int64(blk)
        first_thread = Int32(tidx == 0)
        ptx.st_global_b64(block_argmax + slot * 8, Int64(vocab_offset + blk * block + idx), first_thread)
        ptx.st_global(block_max + slot * 4, [ptx.f32_bits(value)], 4, first_thread)

        # Release this CTA's result; the CTA completing the row's count for
        # this step acquires all of them.
        cute.arch.barrier()
        if tidx == 0:
            ticket = ptx.atom_add_u32(arrivals + row * 4, Uint32(1), "acq_rel", "gpu")
            ptx.st_shared_b32(ticket_word, ticket)
        cute.arch.barrier()
        arrival = Int32(ptx.ld_shared_b32(ticket_word))
        if ((arrival + 1) % self.blocks == 0) & (warp < self.finish_warps):
            self._finish(tidx, warp_values, warp_indices, row, block_argmax, block_max, tokens, tokens_s0, w1, emb, packets)

    @cute.jit
    def _finish(
        self, tidx: Int32, warp_values: Int32, warp_indices: Int32, row: Int64, block_argmax: Int64,
        block_max: Int64, tokens: Int64, tokens_s0: Int64, w1: Int64, emb: Int64, packets: Int64,
    ) -> None:
        """The row's last CTA (its first ``finish_warps`` warps): the winner
        over the blocks' (score, global id) results, then the token and next
        w1 row, or the packet (score bits, global id, 0, 0)."""
        blocks, threads = self.blocks, self.finish_warps * WARP
        warp = tidx // WARP
        first = row * blocks
        got = []
        for q in cutlass.range_constexpr(-(-blocks // threads)):
            which = tidx + q * threads
            if const_expr((q + 1) * threads <= blocks):
                present = Int32(1)
            else:
                present = Int32(which < blocks)
            bits = ptx.ld_volatile_b32_or(block_max + (first + Int64(which)) * 4, present, Uint32(NEG_INF_BITS))
            gid = ptx.ld_volatile_b32_or(block_argmax + (first + Int64(which)) * 8, present, Uint32(BIG_INDEX))
            got.append((ptx.f32_from_bits(bits), Int32(gid)))
        best_v, best_id = _tree_argmax(got, ptx.argmax_combine_in_order)
        best_v, best_id = _warp_argmax(best_v, best_id, WARP // 2)
        if const_expr(self.finish_warps > 1):
            ptx.st_shared_b32(warp_values + warp * 4, ptx.f32_bits(best_v))
            ptx.st_shared_b32(warp_indices + warp * 4, Uint32(best_id))
            cute.arch.barrier()
            best_v, best_id = _tree_argmax(
                [
                    (ptx.f32_from_bits(ptx.ld_shared_b32(warp_values + w * 4)), Int32(ptx.ld_shared_b32(warp_indices + w * 4)))
                    for w in range(self.finish_warps)
                ],
                ptx.argmax_combine,
            )
        first_thread = Int32(tidx == 0)
        if const_expr(self.sharded):
            words = [ptx.f32_bits(best_v), Uint32(best_id), Uint32(0), Uint32(0)]
            ptx.st_global(packets + row * 16, words, 16, first_thread)
        else:
            token = Int64(best_id)
            ptx.st_global_b64(tokens + row * tokens_s0 * 8, token, first_thread)
            _copy_row(
                w1 + ptx.min_u64(token, self.w1_rows - 1) * self.row_bytes,
                emb + row * self.row_bytes, tidx, threads, self.row_bytes, self.chunk,
            )


class PickKernel(KernelVariant):
    """Grid (rows,), one warp: the winner over the gathered ``[tp, rows, 4]``
    packets (lane l holds rank l % tp; a butterfly over tp lanes), its token
    and w1 row."""

    def __init__(self, *, tp: int, pdl: bool, row_bytes: int, chunk: int, w1_rows: int) -> None:
        if tp < 1 or tp > WARP or tp & (tp - 1):
            raise ValueError(f"tp must be a power of two in [1, {WARP}], got {tp}")
        self.tp, self.pdl = tp, pdl
        self.row_bytes, self.chunk, self.w1_rows = row_bytes, chunk, w1_rows

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_pick", self.tp, self.pdl, self.row_bytes, self.chunk, self.w1_rows)

    @cute.jit
    def __call__(
        self, packets: Int64, rows: Int32, tokens: Int64, tokens_s0: Int64, w1: Int64, emb: Int64,
        stream: cuda.CUstream,
    ) -> None:
        self.kernel(packets, rows, tokens, tokens_s0, w1, emb).launch(
            grid=(rows, 1, 1), block=(PICK_THREADS, 1, 1), stream=stream, use_pdl=self.pdl
        )

    @cute.kernel
    def kernel(self, packets: Int64, rows: Int32, tokens: Int64, tokens_s0: Int64, w1: Int64, emb: Int64) -> None:
        if const_expr(self.pdl):
            # The packets are the gather's output.
            cute.arch.griddepcontrol_wait()
        tidx, _, _ = cute.arch.thread_idx()
        r, _, _ = cute.arch.block_idx()
        row = Int64(r)
        rank = Int64(tidx % self.tp)
        words = ptx.ld_global(packets + (rank * Int64(rows) + row) * 16, 8, Int32(1))
        best_v, best_id = ptx.f32_from_bits(words[0]), Int32(words[1])
        if const_expr(self.tp > 1):
            best_v, best_id = _warp_argmax(best_v, best_id, self.tp // 2)
        token = Int64(best_id)
        ptx.st_global_b64(tokens + row * tokens_s0 * 8, token, Int32(tidx == 0))
        _copy_row(
            w1 + ptx.min_u64(token, self.w1_rows - 1) * self.row_bytes,
            emb + row * self.row_bytes, tidx, PICK_THREADS, self.row_bytes, self.chunk,
        )


class CacheFillKernel(KernelVariant):
    """Grid (rows * steps, ceil(V / 1024)), 128 threads of 8 consecutive
    entries: scatter of the gathered ``[tp, rows, steps, shard]`` draft
    logits (rank stride ``src_s0``) into ``cache[idx_map[r, i], i, :]``; a
    negative (or out of range) request row is skipped. ``vector``: one
    16-byte copy per thread."""

    def __init__(self, *, vector: bool) -> None:
        self.vector = vector

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_fill", self.vector)

    @cute.jit
    def __call__(
        self, src: Int64, src_s0: Int64, cache: Int64, cache_s0: Int64, cache_s1: Int64, idx_map: Int64,
        idx_s0: Int64, idx_s1: Int64, max_reqs: Int64, steps: Int32, shard: Int32, vocab: Int32,
        grid_x: Int32, grid_y: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(src, src_s0, cache, cache_s0, cache_s1, idx_map, idx_s0, idx_s1, max_reqs, steps, shard, vocab).launch(
            grid=(grid_x, grid_y, 1), block=(THREADS, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(
        self, src: Int64, src_s0: Int64, cache: Int64, cache_s0: Int64, cache_s1: Int64, idx_map: Int64,
        idx_s0: Int64, idx_s1: Int64, max_reqs: Int64, steps: Int32, shard: Int32, vocab: Int32,
    ) -> None:
        per_thread = FILL_BLOCK // THREADS
        tidx, _, _ = cute.arch.thread_idx()
        rs, blk, _ = cute.arch.block_idx()
        r = rs // steps
        i = rs - r * steps
        req = ptx.ld_global_nc_b64(idx_map + (Int64(r) * idx_s0 + Int64(i) * idx_s1) * 8, Int32(1))
        valid = Int32((req >= 0) & (req < max_reqs))
        first = blk * FILL_BLOCK + tidx * per_thread
        target = cache + (req * cache_s0 + Int64(i) * cache_s1) * 2
        src_row = Int64(rs) * Int64(shard)
        if const_expr(self.vector):
            k = first // shard
            local = first - k * shard
            keep = valid & Int32(first < vocab)
            words = ptx.ld_global_nc(src + (Int64(k) * src_s0 + src_row + Int64(local)) * 2, 16, keep)
            ptx.st_global(target + Int64(first) * 2, words, 16, keep)
        else:
            loaded = []
            for e in cutlass.range_constexpr(per_thread):
                c = first + e
                k = c // shard
                local = c - k * shard
                keep = valid & Int32(c < vocab)
                loaded.append((c, keep, ptx.ld_global_nc(src + (Int64(k) * src_s0 + src_row + Int64(local)) * 2, 2, keep)))
            for c, keep, words in loaded:
                ptx.st_global(target + Int64(c) * 2, words, 2, keep)


# ---------------------------------------------------------------------------
# Compilation (cached by configuration; never under capture)
# ---------------------------------------------------------------------------

_COMPILED: dict[tuple, Any] = {}
_KEEP_ALIVE: list = []
_COMPILE_LOCK = threading.Lock()


def assert_not_capturing(what: str) -> None:
    """Raise ``CaptureError`` if the current CUDA stream is capturing a graph."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise CaptureError(
            f"{what} is not compiled and cannot compile under CUDA graph capture: "
            "build FusedMarkovLoop (or call precompile) before capturing"
        )


def _fake_args(kinds: str) -> list:
    """Placeholder compile arguments: i = Int64, w = Int32, f = Float32, s = stream."""
    table = {"i": lambda: Int64(0), "w": lambda: Int32(1), "f": lambda: Float32(0.0), "s": cute.runtime.make_fake_stream}
    return [table[k]() for k in kinds]


_SIGNATURES = {
    AnchorKernel: "iiiiiiws",
    StepKernel: "i" * 21 + "wwwfffws",
    PickKernel: "iwiiiis",
    CacheFillKernel: "i" * 9 + "wwwwws",
}


def compile_kernel(cls, options: str | None = None, **config):
    """``cute.compile`` of ``cls(**config)`` (cached by class, configuration
    and options); raises ``CaptureError`` instead of compiling under capture."""
    key = (cls.__name__, tuple(sorted(config.items())), options)
    with _COMPILE_LOCK:
        compiled = _COMPILED.get(key)
        if compiled is None:
            assert_not_capturing(f"{cls.__name__}{config}")
            args = _fake_args(_SIGNATURES[cls])
            kernel = cls(**config)
            with compiling():
                compiled = cute.compile(kernel, *args, options=options) if options else cute.compile(kernel, *args)
            # The kernel object stays alive with its compiled function: the
            # DSL keys some tracing state by id(), which a freed object's
            # address could otherwise hand to the next kernel traced.
            _KEEP_ALIVE.append(kernel)
            _COMPILED[key] = compiled
        return compiled


def compile_variants(arch: str):
    """The compile gate's registry entry (see ``harness/compile_gate.py``):
    ``(name, thunk(options), must_not_spill)`` for every kernel variant this
    family can launch, on representative shapes (R = 256, vocab widths that
    give one and four finishing warps)."""
    del arch  # the gate selects the target; the variants are the same
    row_bytes = 512
    variants = []

    def entry(name, cls, **config):
        variants.append((name, lambda options, cls=cls, config=config: compile_kernel(cls, options, **config), True))

    entry("markov.anchor", AnchorKernel, row_bytes=row_bytes, chunk=4, w1_rows=4096)
    for block in BLOCK_SIZES:
        for blocks in (8, 160):
            for vector in (False, True) if vector_bytes(block) else (False,):
                for has_cap in (False, True):
                    for sharded in (False, True):
                        for pdl in (False, True):
                            fw = finish_warps(blocks)
                            chunk = copy_chunk(row_bytes, WARP * fw, ())
                            entry(
                                f"markov.step[b{block},n{blocks},{'vec' if vector else 'scalar'},"
                                f"{'cap' if has_cap else 'nocap'},{'shard' if sharded else 'full'},{'pdl' if pdl else 'nopdl'}]",
                                StepKernel, block=block, blocks=blocks, vector=vector, has_cap=has_cap,
                                sharded=sharded, pdl=pdl, row_bytes=row_bytes, chunk=chunk, w1_rows=4096,
                            )
    for tp in (1, 2, 4, 8, 16, 32):
        for pdl in (False, True):
            entry(f"markov.pick[tp{tp},{'pdl' if pdl else 'nopdl'}]", PickKernel, tp=tp, pdl=pdl,
                  row_bytes=row_bytes, chunk=copy_chunk(row_bytes, PICK_THREADS, ()), w1_rows=4096)
    for vector in (False, True):
        entry(f"markov.cache_fill[{'vec' if vector else 'scalar'}]", CacheFillKernel, vector=vector)
    return variants


def _stream():
    """The current torch stream as a ``cuda.CUstream``."""
    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


# ---------------------------------------------------------------------------
# Host class: the whole draft loop (family interface of docs/interfaces.md)
# ---------------------------------------------------------------------------

_CONFIG_KEYS = {"vocab", "dim", "tp", "max_reqs", "has_cap", "mult", "cap", "inv_cap", "block"}


def default_bias(emb: torch.Tensor, w2_shard: torch.Tensor) -> torch.Tensor:
    """The Markov head GEMV as a plain BF16 torch matmul (benchmarks)."""
    return emb @ w2_shard.t()


class _SoloComm:
    """World of one: the gather is the tensor with a leading 1."""

    rank, world = 0, 1

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` as a ``[1, *shape]`` stack."""
        return tensor.unsqueeze(0)


def _require(condition: bool, exc, message: str) -> None:
    """Raise ``exc(message)`` unless ``condition``."""
    if not condition:
        raise exc(message)


def _check_tensor(name: str, t, dtype, shape: tuple, device) -> None:
    """Type, dtype, shape and device of one argument, errors naming it."""
    _require(isinstance(t, torch.Tensor), TypeError, f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    _require(t.dtype == dtype, ValueError, f"{name}: expected dtype {dtype}, got {t.dtype}")
    _require(
        tuple(t.shape) == tuple(shape), ValueError, f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}"
    )
    _require(t.device == device, ValueError, f"{name}: expected device {device}, got {t.device}")


class FusedMarkovLoop:
    """The fused Markov draft loop of one rank (seed 001), CuTe DSL kernels.

    ``FusedMarkovLoop(comm_or_fabric, static, config, *, bias_fn=None)``:
    ``comm_or_fabric`` has ``rank``, ``world`` and ``all_gather(t) -> [world,
    *t.shape]`` (None: a world of one); ``static`` holds ``w1`` and ``w2``
    (full, BF16 ``[V, R]``, on the GPU); ``config`` the family's keys
    (``vocab, dim, tp, max_reqs, has_cap, mult, cap, inv_cap, block``) plus
    optional ``pdl`` (bool) and ``sharded`` (default ``tp > 1``).
    ``bias_fn(emb, w2_shard) -> [rows, shard]`` BF16 computes the GEMV.
    Every kernel the configuration can launch compiles here.
    """

    def __init__(self, comm_or_fabric, static: dict, config: dict, *, bias_fn: Callable | None = None) -> None:
        comm = comm_or_fabric if comm_or_fabric is not None else _SoloComm()
        for attr in ("rank", "world", "all_gather"):
            _require(hasattr(comm, attr), TypeError, f"comm_or_fabric: expected an object with {attr!r} (a Comm)")
        _require(isinstance(config, dict), TypeError, f"config: expected a dict, got {type(config).__name__}")
        missing = sorted(_CONFIG_KEYS - set(config))
        _require(not missing, ValueError, f"config: missing keys {missing}")
        vocab, dim, tp = int(config["vocab"]), int(config["dim"]), int(config["tp"])
        _require(vocab >= 1, ValueError, f"config.vocab: expected >= 1, got {vocab}")
        _require(dim >= 1, ValueError, f"config.dim: expected >= 1, got {dim}")
        _require(tp >= 1 and tp <= WARP and tp & (tp - 1) == 0, ValueError, f"config.tp: expected a power of two in [1, 32], got {tp}")
        _require(comm.world == tp, ValueError, f"comm_or_fabric: world {comm.world} != config.tp {tp}")
        _require(vocab % tp == 0, ValueError, f"config.vocab: {vocab} is not divisible by tp {tp}")
        block = int(config["block"])
        _require(block in BLOCK_SIZES, ValueError, f"config.block: expected one of {BLOCK_SIZES}, got {block}")
        max_reqs = int(config["max_reqs"])
        _require(max_reqs >= 1, ValueError, f"config.max_reqs: expected >= 1, got {max_reqs}")
        for key in ("mult", "cap", "inv_cap"):
            _require(isinstance(config[key], (int, float)), TypeError, f"config.{key}: expected a float")
        self.comm = comm
        self.rank, self.tp = int(comm.rank), tp
        self.vocab, self.dim, self.block, self.max_reqs = vocab, dim, block, max_reqs
        self.width = vocab // tp
        self.vocab_offset = self.rank * self.width
        self.has_cap = bool(config["has_cap"])
        self.pdl = bool(config.get("pdl", False))
        self.sharded = bool(config.get("sharded", tp > 1))
        _require(self.sharded or tp == 1, ValueError, "config.sharded: must be true when tp > 1")
        # FP32 scalars as the kernels see them (round to nearest once here).
        self.mult, self.cap, self.inv_cap = (float(torch.tensor(float(config[k]), dtype=torch.float32)) for k in ("mult", "cap", "inv_cap"))
        _require(isinstance(static, dict), TypeError, f"static: expected a dict, got {type(static).__name__}")
        for key in ("w1", "w2"):
            _require(key in static, ValueError, f"static: missing {key!r}")
        w1, w2 = static["w1"], static["w2"]
        _require(isinstance(w1, torch.Tensor) and w1.is_cuda, ValueError, "static.w1: expected a CUDA tensor")
        self.device = w1.device
        _check_tensor("static.w1", w1, torch.bfloat16, (vocab, dim), self.device)
        _check_tensor("static.w2", w2, torch.bfloat16, (vocab, dim), self.device)
        _require(w1.is_contiguous(), ValueError, "static.w1: expected a contiguous (row-major) tensor")
        self.w1 = w1
        self.w2_shard = w2[self.vocab_offset : self.vocab_offset + self.width]
        self.bias_fn = bias_fn if bias_fn is not None else default_bias
        self.row_bytes = dim * 2
        self.blocks = -(-self.width // block)
        self._launches = 0
        self.precompile()

    # -- compilation -----------------------------------------------------

    def _chunk(self, threads: int) -> int:
        """Row-copy access width for ``threads`` threads (w1 and emb rows;
        emb is a fresh allocation, 256-byte aligned)."""
        return copy_chunk(self.row_bytes, threads, (self.w1.data_ptr(),))

    def _step_kernel(self, vector: bool):
        """The compiled step kernel of this loop at ``vector``."""
        return compile_kernel(
            StepKernel, block=self.block, blocks=self.blocks, vector=vector, has_cap=self.has_cap,
            sharded=self.sharded, pdl=self.pdl, row_bytes=self.row_bytes,
            chunk=self._chunk(WARP * finish_warps(self.blocks)), w1_rows=self.vocab,
        )

    def precompile(self) -> None:
        """Compile every kernel this configuration may launch (call before
        capture; compiled kernels are shared by configuration)."""
        assert_not_capturing("FusedMarkovLoop.precompile")
        self._anchor = compile_kernel(AnchorKernel, row_bytes=self.row_bytes, chunk=self._chunk(THREADS), w1_rows=self.vocab)
        self._steps = {v: self._step_kernel(v) for v in ((False, True) if vector_bytes(self.block) else (False,))}
        if self.sharded:
            self._pick = compile_kernel(
                PickKernel, tp=self.tp, pdl=self.pdl, row_bytes=self.row_bytes,
                chunk=self._chunk(PICK_THREADS), w1_rows=self.vocab,
            )
            self._fills = {v: compile_kernel(CacheFillKernel, vector=v) for v in (False, True)}
        # The bias GEMV runs once here, on zeros, so its own first-use work (library
        # handles, workspaces, lazily loaded kernels) never happens under capture.
        self.bias_fn(torch.zeros(1, self.dim, dtype=torch.bfloat16, device=self.device), self.w2_shard)

    # -- validation --------------------------------------------------------

    def _validate(self, call_inputs: dict) -> tuple[int, int]:
        """Check every call input (before any launch); returns (rows, steps)."""
        _require(isinstance(call_inputs, dict), TypeError, f"call_inputs: expected a dict, got {type(call_inputs).__name__}")
        need = ("input_ids", "anchor_idx", "base", "idx_map", "pos", "seeds", "temperature", "cache")
        missing = [k for k in need if k not in call_inputs]
        _require(not missing, ValueError, f"call_inputs: missing {missing}")
        base = call_inputs["base"]
        _require(isinstance(base, torch.Tensor) and base.dim() == 3, ValueError,
                 f"call_inputs.base: expected a [rows, steps, {self.vocab}] tensor")
        rows, steps, vocab = base.shape
        _require(rows >= 1 and steps >= 1, ValueError, f"call_inputs.base: rows and steps must be >= 1, got {tuple(base.shape)}")
        dev = self.device
        ids = call_inputs["input_ids"]
        _require(isinstance(ids, torch.Tensor) and ids.dim() == 1 and ids.numel() >= 1, ValueError,
                 "call_inputs.input_ids: expected a non-empty 1-D tensor")
        _check_tensor("call_inputs.input_ids", ids, torch.int32, (ids.shape[0],), dev)
        _check_tensor("call_inputs.anchor_idx", call_inputs["anchor_idx"], torch.int64, (rows,), dev)
        _check_tensor("call_inputs.base", base, torch.bfloat16, (rows, steps, self.vocab), dev)
        _check_tensor("call_inputs.idx_map", call_inputs["idx_map"], torch.int64, (rows, steps), dev)
        _check_tensor("call_inputs.pos", call_inputs["pos"], torch.int64, (rows, steps), dev)
        _check_tensor("call_inputs.seeds", call_inputs["seeds"], torch.int64, (self.max_reqs,), dev)
        _check_tensor("call_inputs.temperature", call_inputs["temperature"], torch.float32, (self.max_reqs,), dev)
        _check_tensor("call_inputs.cache", call_inputs["cache"], torch.bfloat16, (self.max_reqs, steps, self.vocab), dev)
        for name, stride in (("input_ids", ids.stride(0)), ("anchor_idx", call_inputs["anchor_idx"].stride(0)),
                             ("seeds", call_inputs["seeds"].stride(0)), ("temperature", call_inputs["temperature"].stride(0)),
                             ("base", base.stride(2)), ("cache", call_inputs["cache"].stride(2))):
            _require(stride == 1, ValueError, f"call_inputs.{name}: expected stride 1 in its last dimension, got {stride}")
        for name in ("base", "cache", "idx_map", "pos"):
            _require(all(s >= 0 for s in call_inputs[name].stride()), ValueError, f"call_inputs.{name}: negative strides")
        if not torch.cuda.is_current_stream_capturing():
            # Values (not capturable: they need the host); under capture the
            # kernels clamp instead (module docstring).
            anchor = call_inputs["anchor_idx"]
            lo, hi = int(anchor.min()), int(anchor.max())
            _require(lo >= 0 and hi < ids.shape[0], ValueError,
                     f"call_inputs.anchor_idx: values must lie in [0, {ids.shape[0]}), got [{lo}, {hi}]")
            hi = int(call_inputs["idx_map"].max())
            _require(hi < self.max_reqs, ValueError,
                     f"call_inputs.idx_map: request rows must be < max_reqs {self.max_reqs} (negative = padding), got {hi}")
        return rows, steps

    def _check_bias(self, bias, rows: int) -> None:
        """The bias callable's output for one step."""
        _check_tensor("bias_fn output", bias, torch.bfloat16, (rows, self.width), self.device)
        _require(bias.stride(1) == 1, ValueError, f"bias_fn output: expected stride 1 in its last dimension, got {bias.stride(1)}")

    def _check_gather(self, name: str, gathered, shape: tuple, dtype) -> None:
        """A gathered tensor from ``comm.all_gather``."""
        _check_tensor(name, gathered, dtype, shape, self.device)
        _require(gathered.is_contiguous(), ValueError, f"{name}: expected a contiguous gather")

    # -- the call ----------------------------------------------------------

    def launch(self, call_inputs: dict, call_params: dict | None = None) -> dict:
        """One call of the draft loop: anchor, per step bias + step (+ gather
        and pick), then (sharded) gather and cache fill. The cache is written
        in place and returned with the tokens and the last ``emb``."""
        rows, steps = self._validate(call_inputs)
        del call_params  # this family has no per-call parameters
        dev, stream = self.device, _stream()
        ids, anchor = call_inputs["input_ids"], call_inputs["anchor_idx"]
        base, cache = call_inputs["base"], call_inputs["cache"]
        idx_map, pos = call_inputs["idx_map"], call_inputs["pos"]
        seeds, temperature = call_inputs["seeds"], call_inputs["temperature"]
        emb = torch.empty(rows, self.dim, dtype=torch.bfloat16, device=dev)
        arrivals = torch.empty(rows, dtype=torch.int32, device=dev)
        tokens = torch.empty(rows, steps, dtype=torch.int64, device=dev)
        block_argmax = torch.empty(rows * self.blocks, dtype=torch.int64, device=dev)
        block_max = torch.empty(rows * self.blocks, dtype=torch.float32, device=dev)
        packets = torch.empty(rows, 4, dtype=torch.int32, device=dev)
        draft = torch.empty(rows, steps, self.width, dtype=torch.bfloat16, device=dev) if self.sharded else None
        i64 = Int64
        self._launches += 1
        self._anchor(i64(ids.data_ptr()), i64(ids.shape[0]), i64(anchor.data_ptr()), i64(self.w1.data_ptr()),
                     i64(emb.data_ptr()), i64(arrivals.data_ptr()), Int32(rows), stream)
        for col in range(steps):
            bias = self.bias_fn(emb, self.w2_shard)
            self._check_bias(bias, rows)
            base_ptr = base.data_ptr() + (col * base.stride(1) + self.vocab_offset) * 2
            if self.sharded:
                cache_ptr, cache_s0 = draft.data_ptr() + col * self.width * 2, steps * self.width
            else:
                cache_ptr, cache_s0 = cache.data_ptr() + col * cache.stride(1) * 2, cache.stride(0)
            vector = step_vectorized(self.block, self.width, (
                (base_ptr, base.stride(0)), (bias.data_ptr(), bias.stride(0)), (cache_ptr, cache_s0)))
            self._steps[vector](
                i64(base_ptr), i64(base.stride(0)), i64(bias.data_ptr()), i64(bias.stride(0)),
                i64(cache_ptr), i64(cache_s0),
                i64(idx_map.data_ptr() + col * idx_map.stride(1) * 8), i64(idx_map.stride(0)),
                i64(pos.data_ptr() + col * pos.stride(1) * 8), i64(pos.stride(0)),
                i64(seeds.data_ptr()), i64(temperature.data_ptr()), i64(self.max_reqs),
                i64(block_argmax.data_ptr()), i64(block_max.data_ptr()), i64(arrivals.data_ptr()),
                i64(tokens.data_ptr() + col * 8), i64(tokens.stride(0)), i64(self.w1.data_ptr()),
                i64(emb.data_ptr()), i64(packets.data_ptr()), Int32(col), Int32(self.width),
                Int32(self.vocab_offset), Float32(self.mult), Float32(self.inv_cap), Float32(self.cap),
                Int32(rows), stream,
            )
            if self.sharded:
                gathered = self.comm.all_gather(packets)
                self._check_gather("comm_or_fabric.all_gather(packets)", gathered, (self.tp, rows, 4), torch.int32)
                self._pick(i64(gathered.data_ptr()), Int32(rows), i64(tokens.data_ptr() + col * 8),
                           i64(tokens.stride(0)), i64(self.w1.data_ptr()), i64(emb.data_ptr()), stream)
        if self.sharded:
            shards = self.comm.all_gather(draft)
            self._check_gather("comm_or_fabric.all_gather(draft)", shards, (self.tp, rows, steps, self.width), torch.bfloat16)
            src_s0 = rows * steps * self.width
            vector = fill_vectorized(self.width, self.vocab, shards.data_ptr(), src_s0, cache.data_ptr(),
                                     (cache.stride(0), cache.stride(1)))
            self._fills[vector](
                i64(shards.data_ptr()), i64(src_s0), i64(cache.data_ptr()), i64(cache.stride(0)),
                i64(cache.stride(1)), i64(idx_map.data_ptr()), i64(idx_map.stride(0)), i64(idx_map.stride(1)),
                i64(self.max_reqs), Int32(steps), Int32(self.width), Int32(self.vocab),
                Int32(rows * steps), Int32(-(-self.vocab // FILL_BLOCK)), stream,
            )
        return {"tokens": tokens, "cache": cache, "emb": emb}

    def state(self) -> dict:
        """Plain ints for progress records: the number of calls launched."""
        return {"launches": self._launches}

    def graph_capture_problem(self) -> str | None:
        """Why a launch cannot be captured into a CUDA graph (None at tp 1: every kernel compiled, inputs on the device)."""
        if self.comm.world > 1:
            return (f"tp {self.comm.world}: the vocab-parallel gather goes through comm.all_gather on the host, "
                    "which a CUDA graph cannot capture")
        return None


__all__ = [
    "AnchorKernel",
    "CacheFillKernel",
    "CaptureError",
    "FusedMarkovLoop",
    "PickKernel",
    "StepKernel",
    "compile_kernel",
    "compile_variants",
    "default_bias",
]
