"""The device kernels of the fused Markov draft loop: ``AnchorKernel``, ``StepKernel``, ``PickKernel``, ``CacheFillKernel``.

Each kernel is a class (``kernels.variant.KernelVariant``): its compile-time
configuration in ``__init__`` (and ``key()``, hence its symbol), a
``@cute.jit __call__`` that launches it on raw addresses and scalars, and the
``@cute.kernel kernel``. What each one computes, the layouts in bytes and the
memory ordering are in ``kernels/markov_fused/host.py``'s docstring; the sizes and
variant rules come from ``layout.py``; the instruction sequences live
in ``kernels/ptx.py``. The host class ``MarkovKernels`` (``host.py``)
compiles and launches them; nothing here reads a torch tensor.

The traced helpers below are plain Python functions called while a kernel is
traced: their Python loops unroll at trace time.

Flight recorder (``flight=True``, the default; ``kernels.flight``): every
kernel takes a ``FlightRing`` and thread 0 of CTA 0 begins the launch's
record and ends it at its own end (none of these kernels has a grid-wide
completion point). Fields: rows (the grid's rows; the fill's ``rows *
steps`` divided by steps), the step's ``col`` as tag and ``aux``, digests
of the scalars every rank passes alike (never ``vocab_offset``). A PDL
kernel (the step, the pick) begins its record after ``griddepcontrol.wait``:
its predecessor (the gather, a step) records into the same ring, and a
record begun before the wait would say the launch started while it was
still waiting for that predecessor.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32, const_expr
from cutlass.memory import SmemAllocator

from kernels import ptx
from kernels.markov_common.arguments import BlockResults, LogitTransform, Rows, Winner
from kernels.markov_fused.layout import (
    BIG_INDEX,
    BLOCK_SIZES,
    FILL_BLOCK,
    NEG_INF_BITS,
    PICK_THREADS,
    STEP_STAMPS,
    THREADS,
    WARP,
    finish_warps,
    vector_bytes,
)
from kernels.flight import ident as flight_ident
from kernels.flight_device import FlightRing, begin, checked_flag, digest, end, key_part
from kernels.variant import KernelVariant

# ---------------------------------------------------------------------------
# Traced helpers
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

    def __init__(self, *, row_bytes: int, chunk: int, w1_rows: int, flight: bool = True) -> None:
        self.row_bytes, self.chunk, self.w1_rows = row_bytes, chunk, w1_rows
        self.flight = checked_flag(flight)

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_anchor", self.row_bytes, self.chunk, self.w1_rows) + key_part(self.flight)

    @cute.jit
    def __call__(
        self, input_ids: Int64, id_count: Int64, anchor_idx: Int64, w1: Int64, emb: Int64, arrivals: Int64,
        rows: Int32, flight_records: Int64, flight_words: Int64, flight_mask: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(
            input_ids, id_count, anchor_idx, w1, emb, arrivals, FlightRing(flight_records, flight_words, flight_mask),
        ).launch(
            grid=(rows, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(self, input_ids: Int64, id_count: Int64, anchor_idx: Int64, w1: Int64, emb: Int64, arrivals: Int64,
               ring: FlightRing) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        r, _, _ = cute.arch.block_idx()
        rows, _, _ = cute.arch.grid_dim()
        flight_launch = begin(self.flight, ring, flight_ident("markov_fused", "anchor"), 0,
              (Uint32(0), Uint32(0), rows, Uint32(0), digest([rows, Uint32(id_count)]), Uint32(0)))
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
        end(self.flight, ring, 0, launch=flight_launch)


class StepKernel(KernelVariant):
    """Grid (rows, blocks), 128 threads, ``block`` vocab entries per CTA; one
    draft step (see ``host.py``'s docstring). ``blocks`` is compile-time.

    ``stamps`` (bench only; the default variants compile as without it): thread 0
    of every CTA stores ``%globaltimer`` with plain stores into the stamps after
    ``block_argmax`` (``layout.step_scratch_slots``), no synchronisation
    added: ``between`` (read at entry, stored with the next: it ends the time
    since this slot's previous step, i.e. the GEMV and the launches),
    ``ready`` (the inputs' loads issued and, with PDL, the wait for the GEMV
    passed), ``scored`` (after the first barrier: every warp's transform,
    cache stores issued, Gumbel scores and argmax), ``arrived`` (after the
    barrier behind the arrival count: the block's result stored and
    released) and ``finish`` (at the end: the row's last CTA reduced the
    blocks and wrote the token and next ``emb`` row; others end at once).
    A stamp is per CTA and bounds thread 0's view."""

    def __init__(
        self, *, block: int, blocks: int, vector: bool, has_cap: bool, sharded: bool, pdl: bool,
        row_bytes: int, chunk: int, w1_rows: int, stamps: bool = False, flight: bool = True,
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
        self.stamps = bool(stamps)
        self.flight = checked_flag(flight)

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        key = ("markov_step", self.block, self.blocks, self.vector, self.has_cap, self.sharded, self.pdl,
               self.row_bytes, self.chunk, self.w1_rows) + key_part(self.flight)
        return key + ("stamps",) if self.stamps else key

    def _stamp(self, block_argmax: Int64, col: Int32, name: str, value: Int64) -> None:
        """With stamps compiled in, thread 0 stores ``value`` as its CTA's stamp ``name`` (``STEP_STAMPS``) of step ``col``."""
        if const_expr(self.stamps):
            tidx, _, _ = cute.arch.thread_idx()
            r, blk, _ = cute.arch.block_idx()
            rows, _, _ = cute.arch.grid_dim()
            slots = Int64(rows) * self.blocks
            slot = Int64(r) * self.blocks + Int64(blk)
            at = block_argmax + (slots + (Int64(col) * slots + slot) * len(STEP_STAMPS) + STEP_STAMPS.index(name)) * 8
            ptx.st_global_b64(at, value, Int32(tidx == 0))

    @cute.jit
    def __call__(
        self, base: Int64, base_s0: Int64, bias: Int64, bias_s0: Int64, cache: Int64, cache_s0: Int64,
        idx_map: Int64, idx_map_s0: Int64, pos: Int64, pos_s0: Int64, seeds: Int64, temperature: Int64,
        max_reqs: Int64, block_argmax: Int64, block_max: Int64, arrivals: Int64, tokens: Int64,
        tokens_s0: Int64, w1: Int64, emb: Int64, packets: Int64, col: Int32, width: Int32,
        vocab_offset: Int32, mult: Float32, inv_cap: Float32, cap: Float32, rows: Int32,
        flight_records: Int64, flight_words: Int64, flight_mask: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(
            Rows(base, base_s0), Rows(bias, bias_s0), Rows(cache, cache_s0), Rows(idx_map, idx_map_s0),
            Rows(pos, pos_s0), seeds, temperature, max_reqs, BlockResults(block_argmax, block_max, arrivals),
            Winner(tokens, tokens_s0, w1, emb, packets), col, width, vocab_offset, LogitTransform(mult, inv_cap, cap),
            FlightRing(flight_records, flight_words, flight_mask),
        ).launch(grid=(rows, self.blocks, 1), block=(THREADS, 1, 1), stream=stream, use_pdl=self.pdl)

    @cute.kernel
    def kernel(
        self, base: Rows, bias: Rows, cache: Rows, idx_map: Rows, pos: Rows, seeds: Int64, temperature: Int64,
        max_reqs: Int64, results: BlockResults, winner: Winner, col: Int32, width: Int32, vocab_offset: Int32,
        transform: LogitTransform, ring: FlightRing,
    ) -> None:
        block, per_thread = self.block, self.per_thread
        rows, _, _ = cute.arch.grid_dim()
        if const_expr(self.stamps):
            entered = ptx.globaltimer()
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
        a_bits = _load_bf16(base.address + row * base.row_stride * 2, offset, mask, self.vector, True)
        req = ptx.ld_global_nc_b64(idx_map.address + row * idx_map.row_stride * 8, Int32(1))
        position = ptx.ld_global_nc_b64(pos.address + row * pos.row_stride * 8, Int32(1)) - 1
        # A request index outside [0, max_reqs) is padding (the host rejects
        # such indices before launch; this keeps a graph replay in bounds).
        valid = Int32((req >= 0) & (req < max_reqs))
        temp = ptx.f32_from_bits(ptx.ld_global_nc(temperature + req * 4, 4, valid)[0])
        seed = ptx.ld_global_nc_b64(seeds + req * 8, valid)
        if const_expr(self.pdl):
            # The bias is the preceding GEMV's output; every store waits too.
            cute.arch.griddepcontrol_wait()
        # The record begins after the wait: before it the predecessor may still run, and this launch has not begun.
        flight_launch = begin(self.flight, ring, flight_ident("markov_fused", "step"), 1, (
            Uint32(col), Uint32(0), rows, Uint32(0),
            digest([width, col, *[ptx.f32_bits(v) for v in transform]]), Uint32(col)))
        if const_expr(self.stamps):
            # Stored after the wait: before it a PDL grid stores nothing.
            self._stamp(results.block_argmax, col, "between", entered)
            self._stamp(results.block_argmax, col, "ready", ptx.globaltimer())
        b_bits = _load_bf16(bias.address + row * bias.row_stride * 2, offset, mask, self.vector, False)

        values, cache_bits, stores = [], [], []
        for k in cutlass.range_constexpr(per_thread):
            bits, logit = ptx.output_logit(a_bits[k], b_bits[k], *transform, mask[k], self.has_cap)
            values.append(logit)
            cache_bits.append(bits)
            stores.append(mask[k] if const_expr(self.sharded) else mask[k] & valid)
        if const_expr(self.sharded):
            cache_row = cache.address + row * cache.row_stride * 2
        else:
            cache_row = cache.address + req * cache.row_stride * 2
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
        if const_expr(self.stamps):
            self._stamp(results.block_argmax, col, "scored", ptx.globaltimer())
        value = ptx.f32_from_bits(ptx.ld_shared_b32(warp_values + (tidx % 4) * 4))
        idx = Int32(ptx.ld_shared_b32(warp_indices + (tidx % 4) * 4))
        value, idx = _warp_argmax(value, idx, 2)
        slot = row * self.blocks + Int64(blk)
        first_thread = Int32(tidx == 0)
        ptx.st_global_b64(results.block_argmax + slot * 8, Int64(vocab_offset + blk * block + idx), first_thread)
        ptx.st_global(results.block_max + slot * 4, [ptx.f32_bits(value)], 4, first_thread)

        # Release this CTA's result; the CTA completing the row's count for
        # this step acquires all of them.
        cute.arch.barrier()
        if tidx == 0:
            ticket = ptx.atom_add_u32(results.arrivals + row * 4, Uint32(1), "acq_rel", "gpu")
            ptx.st_shared_b32(ticket_word, ticket)
        cute.arch.barrier()
        if const_expr(self.stamps):
            self._stamp(results.block_argmax, col, "arrived", ptx.globaltimer())
        arrival = Int32(ptx.ld_shared_b32(ticket_word))
        if ((arrival + 1) % self.blocks == 0) & (warp < self.finish_warps):
            self._finish(tidx, warp_values, warp_indices, row, results, winner)
        if const_expr(self.stamps):
            self._stamp(results.block_argmax, col, "finish", ptx.globaltimer())
        end(self.flight, ring, 1, launch=flight_launch)

    @cute.jit
    def _finish(
        self, tidx: Int32, warp_values: Int32, warp_indices: Int32, row: Int64, results: BlockResults,
        winner: Winner,
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
            bits = ptx.ld_volatile_b32_or(results.block_max + (first + Int64(which)) * 4, present,
                                          Uint32(NEG_INF_BITS))
            gid = ptx.ld_volatile_b32_or(results.block_argmax + (first + Int64(which)) * 8, present,
                                         Uint32(BIG_INDEX))
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
            ptx.st_global(winner.packets + row * 16, words, 16, first_thread)
        else:
            token = Int64(best_id)
            ptx.st_global_b64(winner.tokens + row * winner.tokens_stride * 8, token, first_thread)
            _copy_row(
                winner.w1 + ptx.min_u64(token, self.w1_rows - 1) * self.row_bytes,
                winner.emb + row * self.row_bytes, tidx, threads, self.row_bytes, self.chunk,
            )


class PickKernel(KernelVariant):
    """Grid (rows,), one warp: the winner over the gathered ``[tp, rows, 4]``
    packets (lane l holds rank l % tp; a butterfly over tp lanes), its token
    and w1 row."""

    def __init__(self, *, tp: int, pdl: bool, row_bytes: int, chunk: int, w1_rows: int, flight: bool = True) -> None:
        if tp < 1 or tp > WARP or tp & (tp - 1):
            raise ValueError(f"tp must be a power of two in [1, {WARP}], got {tp}")
        self.tp, self.pdl = tp, pdl
        self.row_bytes, self.chunk, self.w1_rows = row_bytes, chunk, w1_rows
        self.flight = checked_flag(flight)

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_pick", self.tp, self.pdl, self.row_bytes, self.chunk, self.w1_rows) + key_part(self.flight)

    @cute.jit
    def __call__(
        self, packets: Int64, rows: Int32, tokens: Int64, tokens_s0: Int64, w1: Int64, emb: Int64,
        flight_records: Int64, flight_words: Int64, flight_mask: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(
            packets, rows, tokens, tokens_s0, w1, emb, FlightRing(flight_records, flight_words, flight_mask),
        ).launch(
            grid=(rows, 1, 1), block=(PICK_THREADS, 1, 1), stream=stream, use_pdl=self.pdl
        )

    @cute.kernel
    def kernel(self, packets: Int64, rows: Int32, tokens: Int64, tokens_s0: Int64, w1: Int64, emb: Int64,
               ring: FlightRing) -> None:
        if const_expr(self.pdl):
            # The packets are the gather's output.
            cute.arch.griddepcontrol_wait()
        # After the wait, as the step's: the record says the launch began only once its predecessor completed.
        flight_launch = begin(self.flight, ring, flight_ident("markov_fused", "pick"), 2,
              (Uint32(0), Uint32(0), rows, Uint32(0), digest([rows]), Uint32(0)))
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
        end(self.flight, ring, 2, launch=flight_launch)


class CacheFillKernel(KernelVariant):
    """Grid (rows * steps, ceil(V / 1024)), 128 threads of 8 consecutive
    entries: scatter of the gathered ``[tp, rows, steps, shard]`` draft
    logits (rank stride ``src_s0``) into ``cache[idx_map[r, i], i, :]``; a
    negative (or out of range) request row is skipped. ``vector``: one
    16-byte copy per thread."""

    def __init__(self, *, vector: bool, flight: bool = True) -> None:
        self.vector = vector
        self.flight = checked_flag(flight)

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_fill", self.vector) + key_part(self.flight)

    @cute.jit
    def __call__(
        self, src: Int64, src_s0: Int64, cache: Int64, cache_s0: Int64, cache_s1: Int64, idx_map: Int64,
        idx_s0: Int64, idx_s1: Int64, max_reqs: Int64, steps: Int32, shard: Int32, vocab: Int32,
        grid_x: Int32, grid_y: Int32, flight_records: Int64, flight_words: Int64, flight_mask: Int32,
        stream: cuda.CUstream,
    ) -> None:
        self.kernel(src, src_s0, cache, cache_s0, cache_s1, idx_map, idx_s0, idx_s1, max_reqs, steps, shard, vocab,
                    FlightRing(flight_records, flight_words, flight_mask)).launch(
            grid=(grid_x, grid_y, 1), block=(THREADS, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(
        self, src: Int64, src_s0: Int64, cache: Int64, cache_s0: Int64, cache_s1: Int64, idx_map: Int64,
        idx_s0: Int64, idx_s1: Int64, max_reqs: Int64, steps: Int32, shard: Int32, vocab: Int32, ring: FlightRing,
    ) -> None:
        per_thread = FILL_BLOCK // THREADS
        rows_steps, _, _ = cute.arch.grid_dim()
        flight_launch = begin(self.flight, ring, flight_ident("markov_fused", "fill"), 3,
              (Uint32(0), Uint32(0), rows_steps // steps, steps, digest([steps, shard, vocab]), Uint32(0)))
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
        end(self.flight, ring, 3, launch=flight_launch)



__all__ = ["AnchorKernel", "CacheFillKernel", "PickKernel", "StepKernel"]
