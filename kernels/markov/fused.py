"""Seed 001: the fused DSpark Markov draft loop in CuTe DSL.

One call drafts ``steps`` tokens for ``rows`` request rows. Per step the
bias GEMV ``bias = emb @ w2_shard^T`` runs outside these kernels (it is the
caller's), then:

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
sharded or not, soft cap on/off, tp of the pick. Compiled kernels are cached
by configuration; nothing compiles under CUDA graph capture.

Public API (seed 001): ``MarkovKernels(w1, embeds, *, width, has_cap, tp,
steps, pick_pdl, fill_vector)`` compiles a loop's kernels; its
``anchor_embed``, ``step``, ``pick`` and ``cache_fill`` launch them on the
caller's tensors around the caller's own GEMV and gathers, each checking
its arguments before its launch. The whole loop as the harness drives it
(config, validation of a call, bias GEMV, gathers) is
``harness/families/markov_fused_kernel.py``.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass import Float32, Int32, Int64, Uint32, const_expr
from cutlass.memory import SmemAllocator

from kernels import ptx
from kernels.compile_clock import compiling
from kernels.variant import KernelVariant

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
            "build MarkovKernels (or run the variant once) before capturing"
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
# Public API (seed 001): the kernels of one loop, around the caller's GEMV
# ---------------------------------------------------------------------------


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


def _check_rows(name: str, t, dtype, rows: int, device) -> None:
    """A ``[rows]`` vector of ``dtype`` (any non-negative stride), e.g. one step's column of a ``[rows, steps]`` map."""
    _check_tensor(name, t, dtype, (rows,), device)
    _require(t.stride(0) >= 0, ValueError, f"{name}: negative stride {t.stride(0)}")


def _check_vector(name: str, t, dtype, device) -> None:
    """A 1-D tensor of ``dtype`` with stride 1."""
    _require(isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() >= 1, ValueError,
             f"{name}: expected a non-empty 1-D tensor")
    _check_tensor(name, t, dtype, (t.shape[0],), device)
    _require(t.stride(0) == 1, ValueError, f"{name}: expected stride 1, got {t.stride(0)}")


class MarkovKernels:
    """The kernels of one fused Markov draft loop (seed 001) over the BF16 Markov w1 table ``w1``.

    ``w1`` is ``[V, R]``, the Markov embedding rows live in ``embeds`` and each
    rank covers ``width`` vocab entries (a shard over ``tp`` ranks, or the
    whole vocab with ``tp`` None). Compiled here, before CUDA graph capture:
    the anchor, the step at each ``(block, PDL, vector)`` of ``steps``, and
    with a vocab shard the pick (``pick_pdl``) and the cache fill at
    ``fill_vector``. A step or fill at another variant compiles when it first
    runs (never under capture: ``CaptureError``).

    A draft call, per the seed: ``anchor_embed`` once, then per step the
    caller's GEMV ``bias = emb @ w2_shard^T`` and ``step``; sharded, the
    caller gathers the ``[rows, 4]`` packets over the TP group and calls
    ``pick``, and after the loop gathers the ``[rows, steps, width]`` draft
    logits and calls ``cache_fill``. Every method launches on the current
    stream on the caller's tensors (fixed pointers: the loop can be captured
    into a CUDA graph where the GEMV and the gathers can) and checks its
    arguments' dtypes, shapes, devices and strides before the launch. Values
    are not read: an anchor is clamped to ``input_ids`` and a token to the
    table, a request row outside ``[0, max_reqs)`` is padding.

    Args:
        w1: [V, R] BF16 Markov embedding table on the GPU, row-major.
        embeds: [n, R] BF16 rows the ``emb`` arguments are row views of (their
            alignment decides the row-copy width; ``emb`` must keep it).
        width: vocab entries per rank (V / tp, or V).
        has_cap: the soft cap ``cap * tanhf(x * inv_cap)`` of the output transform.
        tp: ranks of the vocab shard (power of two <= 32), or None: unsharded.
        steps: the ``(block, pdl, vector)`` step variants to compile now.
        pick_pdl: launch the pick with programmatic dependent launch.
        fill_vector: the cache-fill variant(s) to compile now (a bool or several).
    """

    def __init__(
        self,
        w1: torch.Tensor,
        embeds: torch.Tensor,
        *,
        width: int,
        has_cap: bool,
        tp: int | None,
        steps: Iterable[tuple[int, bool, bool]],
        pick_pdl: bool,
        fill_vector: bool | Iterable[bool],
    ) -> None:
        _require(isinstance(w1, torch.Tensor) and w1.is_cuda, ValueError, "w1: expected a CUDA tensor")
        _require(w1.dim() == 2 and w1.dtype == torch.bfloat16, ValueError,
                 f"w1: expected a BF16 [V, R] tensor, got {w1.dtype} {tuple(w1.shape)}")
        _require(w1.is_contiguous(), ValueError, "w1: expected a contiguous (row-major) tensor")
        self.device = w1.device
        vocab, dim = w1.shape
        _require(isinstance(embeds, torch.Tensor) and embeds.dim() == 2, ValueError,
                 f"embeds: expected a BF16 [n, {dim}] tensor")
        _check_tensor("embeds", embeds, torch.bfloat16, (embeds.shape[0], dim), self.device)
        _require(isinstance(width, int) and 1 <= width <= vocab, ValueError,
                 f"width: expected an int in [1, {vocab}], got {width!r}")
        _require(tp is None or (isinstance(tp, int) and 1 <= tp <= WARP and tp & (tp - 1) == 0), ValueError,
                 f"tp: expected None or a power of two in [1, {WARP}], got {tp!r}")
        self.w1, self.embeds, self.width, self.has_cap = w1, embeds, width, bool(has_cap)
        self.tp, self.sharded, self.pick_pdl = tp, tp is not None, bool(pick_pdl)
        self.row_bytes = dim * 2
        self._anchor = compile_kernel(AnchorKernel, row_bytes=self.row_bytes, chunk=self._chunk(THREADS),
                                      w1_rows=vocab)
        self._steps: dict[tuple[int, bool, bool], Any] = {}
        for block, pdl, vector in steps:
            self._step(block, pdl, vector)
        self._fills: dict[bool, Any] = {}
        if self.sharded:
            self._pick = compile_kernel(PickKernel, tp=tp, pdl=self.pick_pdl, row_bytes=self.row_bytes,
                                        chunk=self._chunk(PICK_THREADS), w1_rows=vocab)
            for vector in (fill_vector,) if isinstance(fill_vector, bool) else fill_vector:
                self._fill(vector)

    @property
    def step_variants(self) -> frozenset[tuple[int, bool, bool]]:
        """The ``(block, PDL, vector)`` of the compiled steps."""
        return frozenset(self._steps)

    def _chunk(self, threads: int) -> int:
        """Row-copy access width for ``threads`` threads, within the alignment of ``w1`` and ``embeds``."""
        return copy_chunk(self.row_bytes, threads, (self.w1.data_ptr(), self.embeds.data_ptr()))

    def _step(self, block: int, pdl: bool, vector: bool):
        """The compiled step kernel at ``(block, pdl, vector)`` (compiled on first use, never under capture)."""
        kernel = self._steps.get((block, pdl, vector))
        if kernel is None:
            _require(block in BLOCK_SIZES, ValueError, f"block: expected one of {BLOCK_SIZES}, got {block}")
            blocks = -(-self.width // block)
            kernel = self._steps[block, pdl, vector] = compile_kernel(
                StepKernel, block=block, blocks=blocks, vector=vector, has_cap=self.has_cap,
                sharded=self.sharded, pdl=pdl, row_bytes=self.row_bytes,
                chunk=self._chunk(WARP * finish_warps(blocks)), w1_rows=self.w1.shape[0],
            )
        return kernel

    def _fill(self, vector: bool):
        """The compiled cache fill at ``vector`` (compiled on first use, never under capture)."""
        kernel = self._fills.get(vector)
        if kernel is None:
            kernel = self._fills[vector] = compile_kernel(CacheFillKernel, vector=vector)
        return kernel

    def _check_emb(self, emb, rows: int) -> None:
        """``emb``: BF16 ``[rows, R]`` contiguous rows, aligned as ``embeds`` (the compiled row-copy width)."""
        _check_tensor("emb", emb, torch.bfloat16, (rows, self.w1.shape[1]), self.device)
        _require(emb.is_contiguous(), ValueError, "emb: expected contiguous rows")
        # The widest row copy compiled (a warp's) divides by every narrower one.
        chunk = self._chunk(WARP)
        _require(emb.data_ptr() % chunk == 0, ValueError,
                 f"emb: expected {chunk}-byte alignment (that of embeds), got address {emb.data_ptr():#x}")

    def anchor_embed(self, input_ids: torch.Tensor, anchor_idx: torch.Tensor, emb: torch.Tensor,
                     arrivals: torch.Tensor) -> None:
        """``emb[r] = w1[input_ids[anchor_idx[r]]]`` and ``arrivals[r] = 0`` for the ``arrivals.numel()`` rows.

        Args:
            input_ids: [T] int32 token ids, stride 1.
            anchor_idx: [rows] int64 index of each row's anchor in ``input_ids``
                (clamped to T - 1), stride 1.
            emb: [rows, R] BF16 row view of ``embeds``, written.
            arrivals: [rows] int32 per-row arrival counters of ``step``, reset.
        """
        _require(isinstance(arrivals, torch.Tensor) and arrivals.dim() == 1, ValueError,
                 "arrivals: expected an int32 [rows] tensor")
        rows = arrivals.shape[0]
        _check_vector("input_ids", input_ids, torch.int32, self.device)
        _check_tensor("anchor_idx", anchor_idx, torch.int64, (rows,), self.device)
        _require(anchor_idx.stride(0) == 1, ValueError, f"anchor_idx: expected stride 1, got {anchor_idx.stride(0)}")
        _check_vector("arrivals", arrivals, torch.int32, self.device)
        self._check_emb(emb, rows)
        i64 = Int64
        self._anchor(i64(input_ids.data_ptr()), i64(input_ids.shape[0]), i64(anchor_idx.data_ptr()),
                     i64(self.w1.data_ptr()), i64(emb.data_ptr()), i64(arrivals.data_ptr()), Int32(rows), _stream())

    def step(
        self,
        base: torch.Tensor,
        bias: torch.Tensor,
        cache: torch.Tensor,
        col: int,
        idx_map: torch.Tensor,
        pos: torch.Tensor,
        seeds: torch.Tensor,
        temperature: torch.Tensor,
        block_argmax: torch.Tensor,
        block_max: torch.Tensor,
        arrivals: torch.Tensor,
        tokens: torch.Tensor,
        emb: torch.Tensor,
        packets: torch.Tensor,
        vocab_offset: int,
        mult: float,
        inv_cap: float,
        cap: float,
        *,
        block: int,
        pdl: bool,
    ) -> None:
        """One draft step ``col`` over ``width`` vocab entries from ``vocab_offset`` for the ``base.shape[0]`` rows.

        Args:
            base: [rows, >= vocab_offset + width] BF16 base logits of this step
                (e.g. ``base[:, col]``), vocab stride 1.
            bias: [rows, width] BF16 output of the caller's GEMV, vocab stride 1.
            cache: BF16 draft-logits cache, vocab stride 1: unsharded
                [max_reqs, steps, V] (row ``idx_map[r]``, step ``col`` written),
                sharded [rows, steps, width] (row r, step ``col`` written).
            col: the step index.
            idx_map: [rows] int64 request row of each row at this step (e.g.
                ``idx_map[:, col]``; outside [0, max_reqs): padding, not cached).
            pos: [rows] int64 position of each row at this step.
            seeds: [max_reqs] int64 per-request sampling seeds, stride 1.
            temperature: [max_reqs] FP32 per-request temperature (0: greedy), stride 1.
            block_argmax: [rows * blocks] int64 scratch (blocks = ceil(width / block)).
            block_max: [rows * blocks] FP32 scratch.
            arrivals: [rows] int32 arrival counters (reset by ``anchor_embed``).
            tokens: [rows, steps] int64; unsharded, column ``col`` written.
            emb: [rows, R] BF16 Markov embedding rows: read by the caller's GEMV;
                unsharded, the next step's rows are written.
            packets: [rows, 4] int32; sharded, (score bits, id, 0, 0) written for ``pick``.
            vocab_offset: this rank's first vocab id (rank * width).
            mult: FP32 logit multiplier.
            inv_cap: FP32 1 / cap (given, not derived).
            cap: FP32 soft cap (read with ``has_cap``).
            block: vocab entries per CTA.
            pdl: launch with programmatic dependent launch (the bias is read after the wait).
        """
        _require(isinstance(base, torch.Tensor) and base.dim() == 2, ValueError,
                 "base: expected a BF16 [rows, V] tensor (one step of the base logits)")
        rows, dev, width = base.shape[0], self.device, self.width
        _check_tensor("base", base, torch.bfloat16, (rows, base.shape[1]), dev)
        _require(base.shape[1] >= vocab_offset + width and base.stride(1) == 1 and base.stride(0) >= 0, ValueError,
                 f"base: expected vocab stride 1 and columns [{vocab_offset}, {vocab_offset + width}), "
                 f"got shape {tuple(base.shape)} strides {base.stride()}")
        _check_tensor("bias", bias, torch.bfloat16, (rows, width), dev)
        _require(bias.stride(1) == 1, ValueError, f"bias: expected stride 1 in its last dimension, got {bias.stride(1)}")
        _require(isinstance(cache, torch.Tensor) and cache.dim() == 3, ValueError,
                 "cache: expected a BF16 [max_reqs, steps, V] (sharded: [rows, steps, width]) tensor")
        _check_tensor("cache", cache, torch.bfloat16, tuple(cache.shape), dev)
        _require(0 <= col < cache.shape[1] and cache.stride(2) == 1 and min(cache.stride()) >= 0, ValueError,
                 f"cache: expected step {col} inside shape {tuple(cache.shape)} and vocab stride 1, "
                 f"got strides {cache.stride()}")
        if self.sharded:
            _require(tuple(cache.shape[::2]) == (rows, width), ValueError,
                     f"cache: expected the sharded draft [rows={rows}, steps, width={width}], got {tuple(cache.shape)}")
        _check_rows("idx_map", idx_map, torch.int64, rows, dev)
        _check_rows("pos", pos, torch.int64, rows, dev)
        _check_vector("seeds", seeds, torch.int64, dev)
        _check_tensor("temperature", temperature, torch.float32, tuple(seeds.shape), dev)
        _require(temperature.stride(0) == 1, ValueError, f"temperature: expected stride 1, got {temperature.stride(0)}")
        blocks = -(-width // block)
        _check_tensor("block_argmax", block_argmax, torch.int64, (rows * blocks,), dev)
        _check_tensor("block_max", block_max, torch.float32, (rows * blocks,), dev)
        _check_tensor("arrivals", arrivals, torch.int32, (rows,), dev)
        _require(isinstance(tokens, torch.Tensor) and tokens.dim() == 2, ValueError,
                 "tokens: expected an int64 [rows, steps] tensor")
        _check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]), dev)
        _require(0 <= col < tokens.shape[1], ValueError, f"tokens: step {col} outside {tuple(tokens.shape)}")
        self._check_emb(emb, rows)
        _check_tensor("packets", packets, torch.int32, (rows, 4), dev)
        _require(packets.is_contiguous() and packets.data_ptr() % 16 == 0, ValueError,
                 "packets: expected a contiguous, 16-byte aligned tensor")
        for scratch in (block_argmax, block_max, arrivals):
            _require(scratch.is_contiguous(), ValueError, "block_argmax, block_max, arrivals: expected contiguous")
        base_ptr = base.data_ptr() + vocab_offset * 2
        cache_ptr, cache_s0 = cache.data_ptr() + col * cache.stride(1) * 2, cache.stride(0)
        vector = step_vectorized(block, width, (
            (base_ptr, base.stride(0)), (bias.data_ptr(), bias.stride(0)), (cache_ptr, cache_s0)))
        i64 = Int64
        self._step(block, pdl, vector)(
            i64(base_ptr), i64(base.stride(0)), i64(bias.data_ptr()), i64(bias.stride(0)),
            i64(cache_ptr), i64(cache_s0), i64(idx_map.data_ptr()), i64(idx_map.stride(0)),
            i64(pos.data_ptr()), i64(pos.stride(0)),
            i64(seeds.data_ptr()), i64(temperature.data_ptr()), i64(seeds.shape[0]),
            i64(block_argmax.data_ptr()), i64(block_max.data_ptr()), i64(arrivals.data_ptr()),
            i64(tokens.data_ptr() + col * tokens.stride(1) * 8), i64(tokens.stride(0)), i64(self.w1.data_ptr()),
            i64(emb.data_ptr()), i64(packets.data_ptr()), Int32(col), Int32(width),
            Int32(vocab_offset), Float32(mult), Float32(inv_cap), Float32(cap),
            Int32(rows), _stream(),
        )

    def pick(self, packets: torch.Tensor, rows: int, tokens: torch.Tensor, step: int, emb: torch.Tensor) -> None:
        """``tokens[r, step]`` and ``emb[r]`` (its w1 row) of the winner over the gathered packets (sharded only).

        Args:
            packets: [tp, rows, 4] int32 every rank's ``step`` packets, gathered, contiguous.
            rows: request rows.
            tokens: [rows, steps] int64; column ``step`` written.
            step: the step index.
            emb: [rows, R] BF16 row view of ``embeds``: the next step's rows, written.
        """
        _require(self.sharded, ValueError, "pick: built without a vocab shard (tp None)")
        _check_tensor("packets", packets, torch.int32, (self.tp, rows, 4), self.device)
        _require(packets.is_contiguous(), ValueError, "packets: expected a contiguous gather")
        _require(isinstance(tokens, torch.Tensor) and tokens.dim() == 2, ValueError,
                 "tokens: expected an int64 [rows, steps] tensor")
        _check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]), self.device)
        _require(0 <= step < tokens.shape[1], ValueError, f"tokens: step {step} outside {tuple(tokens.shape)}")
        self._check_emb(emb, rows)
        i64 = Int64
        self._pick(i64(packets.data_ptr()), Int32(rows), i64(tokens.data_ptr() + step * tokens.stride(1) * 8),
                   i64(tokens.stride(0)), i64(self.w1.data_ptr()), i64(emb.data_ptr()), _stream())

    def cache_fill(self, gathered: torch.Tensor, src_s0: int, cache: torch.Tensor, idx_map: torch.Tensor,
                   rows: int, steps: int, shard: int, vocab: int) -> None:
        """Scatter the gathered draft logits into the full-vocab cache rows ``idx_map`` names (sharded only).

        Args:
            gathered: [tp, rows, steps, shard] BF16 every rank's draft logits
                (rank stride ``src_s0`` elements).
            src_s0: elements between two ranks' shards.
            cache: [max_reqs, steps, vocab] BF16, vocab stride 1; rows written in place.
            idx_map: [rows, steps] int64 request row of each row and step
                (negative or >= max_reqs: skipped).
            rows, steps, shard, vocab: the sizes above.
        """
        _require(self.sharded, ValueError, "cache_fill: built without a vocab shard (tp None)")
        _check_tensor("gathered", gathered, torch.bfloat16, (self.tp, rows, steps, shard), self.device)
        _require(gathered.stride(3) == 1 and gathered.stride(2) == shard and gathered.stride(1) == steps * shard
                 and gathered.stride(0) == src_s0, ValueError,
                 f"gathered: expected rank stride src_s0={src_s0} and contiguous rows, got strides {gathered.stride()}")
        _require(isinstance(cache, torch.Tensor) and cache.dim() == 3, ValueError,
                 f"cache: expected a BF16 [max_reqs, {steps}, {vocab}] tensor")
        _check_tensor("cache", cache, torch.bfloat16, (cache.shape[0], steps, vocab), self.device)
        _require(cache.stride(2) == 1 and min(cache.stride()) >= 0, ValueError,
                 f"cache: expected vocab stride 1, got strides {cache.stride()}")
        _check_tensor("idx_map", idx_map, torch.int64, (rows, steps), self.device)
        _require(min(idx_map.stride()) >= 0, ValueError, "idx_map: negative strides")
        _require(shard * self.tp == vocab, ValueError, f"shard: expected vocab / tp = {vocab // self.tp}, got {shard}")
        vector = fill_vectorized(shard, vocab, gathered.data_ptr(), src_s0, cache.data_ptr(),
                                 (cache.stride(0), cache.stride(1)))
        i64 = Int64
        self._fill(vector)(
            i64(gathered.data_ptr()), i64(src_s0), i64(cache.data_ptr()), i64(cache.stride(0)),
            i64(cache.stride(1)), i64(idx_map.data_ptr()), i64(idx_map.stride(0)), i64(idx_map.stride(1)),
            i64(cache.shape[0]), Int32(steps), Int32(shard), Int32(vocab),
            Int32(rows * steps), Int32(-(-vocab // FILL_BLOCK)), _stream(),
        )


__all__ = [
    "AnchorKernel",
    "CacheFillKernel",
    "CaptureError",
    "MarkovKernels",
    "PickKernel",
    "StepKernel",
    "compile_kernel",
    "compile_variants",
]
