"""Seed 000's ShardedMarkovSample: the sharded Markov draft chain as one cooperative CuTe DSL kernel.

For request row r and step i, with p the row's previous token (its anchor
``input_ids[r * query_per_row]`` for i = 0)::

    logits[r, i] = cache_round(base[r, i] + bf16(head_shard . embed_table[p]))
    token[r, i]  = argmax(logits[r, i])                      temperature 0
                 = argmax(logits[r, i] / T + noise[r, i])    otherwise

Work split. Rank k owns rows ``[k V/world, (k+1) V/world)`` of the head. A
CTA is 16 warps (512 threads, one CTA per SM: the register file is full);
warp w of CTA c keeps head tile ``c * 16 + w`` (16 rows x 256 BF16) in
registers for the whole launch (lane ``4 g + t`` holds rows g and g + 8,
16 bytes at k = 32 chunk + 8 t of each of the 8 chunks); its further tiles
``c * 16 + w + k * 16 ctas`` (the head beyond one tile per warp: 49 MB of
the 66 MB head at world 1) are streamed at every step through the warp's
8 KB buffer in shared memory with ``cp.async`` (``head_tile.copy_tile``):
the copies of the warp's next streamed tile are issued as soon as the MMAs
have read the buffer (in-order issue: they waited for its loads), so they
fly during the tile's epilogue, and after the step's last tile the next
step's first one is requested (the head is the same at every step), which
hides it behind the exchange. Half of those copies (``l2_keep``) carry an
L2 ``evict_last`` policy: that half of the streamed head is still in L2 at
the next step. The eight request rows' embeddings sit in shared memory
(``[8][256]`` BF16) and are the eight columns of ``mma.sync.m16n8k16``
(BF16 in, FP32 accumulate): MMA ``2 chunk + h`` covers k = ``{32 chunk + 8
t + 4 h + j}``, chained in that order from a +0.0 accumulator
(``head_tile``, ``golden.mma_bias.mma_k_groups``). Lane (g, t) ends
with the FP32 sums of vocab rows g, g + 8 for request rows 2t, 2t + 1.

Per tile and request row (the lane's two rows in a loop, loads predicated on
``r < rows``):
``bias = cvt.rn.bf16(acc)``, ``value = add.rn.f32(base, bias)`` (rounded to
BF16 again for a BF16 cache), the value's cache bits go to the warp's shared
staging ``[warp][row 8][16]`` (32-bit words), the score is ``value`` or
``add.rn(div.full(value, T), noise)`` (``selp`` on ``T != 0``), and the
lane's best 64-bit candidate key (``layout``) per request row is
kept. Then the tile's cache elements leave as 16-byte vectors, one per lane
and request row, into the local cache (``logits_cache[state, i, :]``) and
every peer's staging buffer. A request index outside ``[0, max_reqs)`` is
padding (``_request_live``): its temperature is not loaded (greedy), nothing
of it is cached or staged. The host rejects an index ``>= max_reqs`` before
the launch, but skips that check under CUDA-graph capture; this bound keeps a
replay with such an index inert, so it never writes out of bounds.

Per step, the exchange (warp 0 of every CTA): the CTA's best key per row
(butterflies over the lanes sharing t, then the 16 warps through shared
memory) is folded into the rank-local maximum (``atom.max.u64`` on the
control words); lane 0 fences (``membar.sys`` on the last step, publishing
every peer staging store of the CTA, else ``membar.gl``) and counts the CTA's
arrival (``atom.add.acq_rel.gpu``). The CTA that arrives last reads and
clears the maxima (``atom.exch``), clears the count, and stores the record
``key << 15 | tag`` for every row slot below ``max_rows`` (rows past
``rows`` post the zero key, so each slot is rewritten on every launch of its
parity) into every rank's mailbox with ``st.relaxed.sys`` (after
``membar.sys`` on the last step). Every CTA then polls its own mailbox
(``ld.relaxed.sys``) until each rank's record of each row below ``rows``
carries this launch's tag: that is the grid barrier and the cross-rank
argmax at once, so the grid must be co-resident: a cooperative launch (the
seed's, one rank per GPU) or, for ranks sharing a GPU, a plain launch whose
grids the host sizes to fit beside each other (``cooperative=False``: a
cooperative grid is only guaranteed co-resident with itself; on the H200 both
kinds ran side by side). Lanes
hold (row, source rank) pairs ``row * 8 + rank`` in two passes of 32, so any
world up to 8 reduces over ranks with three butterflies. The winners'
embedding rows are loaded for the next step; CTA 0 writes the tokens.

After the last step (fenced with ``membar.sys`` after the awaits) every CTA
copies the peers' shards of its share of (row, step) from this rank's
staging buffer (``ld.global.cg``: peers wrote it) into the cache. The last
CTA to finish clears the end count and advances the launch counter.

Timeouts. A wait with ``timeout_ns > 0`` that exceeds it gives up: the CTA
is marked timed out (shared memory), every later wait of the CTA returns at
once and the CTA posts no more records, so it runs to the end of the kernel
quickly. The first thread of the rank to claim the control word
``CLAIM_WORD`` saves what it waited for (step, awaited rank, seen tag,
elapsed time); at the end of the kernel, where the resident tile is no longer
live (no registers to save around the ``printf``), its CTA commits the
``kernels.diag`` record (with the expected tag and the launch counter,
``WaitKind.MAILBOX_TAG``) at ``diag`` and traps. One claimer: concurrent
timeouts never tear the record.

Flight recorder (``flight=True``, the default; ``kernels.flight``): thread 0
of CTA 0 begins the launch's record where it reads the launch counter (tag,
parity, rows, steps, a digest of query_per_row, world, vocab_local, rows and
max_rows), and the last CTA ends it where it advances the counter.

Shared memory per CTA (bytes): embeddings 4096, the warps' tile staging
8192 (``[16][8][16]`` words), the warps' best keys 1024 (``[16][8]`` u64),
the winners 64, the launch counter 16, the timeout state 32, the warps'
stream buffers 131072 (``[16][16 slots][32 lanes][16]``).

Register budget: ptxas caps a 512-thread CTA at 128 registers and the
resident tile takes 64 of them for the whole step loop, so the rest is kept
lean on purpose (one tile epilogue, loops where unrolling would keep several
loads or addresses live, the timeout report after the loop); every variant
compiles without spills (the compile gate fails on a spill).

Phase stamps (``stamps=True``, a bench-only variant: the default variants
compile to the same code as without the option). Thread 0 of every CTA
stores ``%globaltimer`` (ns) with a plain ``st.global.b64`` into int64
``[ctas][stamp_names(steps)]`` after the control words
(``layout.STAMP_WORD``), at points the kernel already passes, with
no synchronisation added: ``start`` (entry), ``setup`` (after the first
barrier: the resident tile's loads issued, the anchors' embeddings in shared
memory), and per step ``resident`` (warp 0's resident tile scored and its
cache and staging stores issued: the MMAs from registers and one epilogue),
``streamed`` (after the barrier that ends the tile loop: every warp's
streamed tiles, their loads from L2 or DRAM, MMAs and epilogues, and the
CTA's best keys in shared memory), ``fold`` (warp 0 folded the CTA's keys
into the rank maximum and counted its arrival; the last CTA also posted
the records), ``wait`` (after the barrier behind the mailbox polls: the grid
barrier and the cross-rank argmax), ``next`` (after the step's last barrier:
tokens stored, the winners' embeddings loaded); then ``copy`` (after the
barrier behind the peers' shard copy) and ``end`` (after the end count).
A stamp is per CTA and bounds thread 0's view: everything before a barrier
for the stamps after one, warp 0's own work otherwise; stores are issued,
not completed, when a stamp is taken.

Addresses are raw 64-bit integers; every access is a ``kernels.ptx`` helper
naming its state space, cache operator and ordering. Inputs written before
the launch (weights, logits, noise, ids, request rows, temperatures) are
read with ``ld.global.nc``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32, const_expr
from cutlass.memory import SmemAllocator

from kernels import ptx
from kernels.markov_common.arguments import BaseLogits, LogitsCache, Rows
from kernels.markov_common.head_tile import (bf16_bits, check_l2_keep, chunk_mma, copy_tile, slot_fragment, stream_bytes,
                                     thread_coordinates, tile_bias)
from kernels.variant import KernelVariant
from kernels.diag import WaitKind, write_diag_and_trap
from kernels.flight import ident as flight_ident
from kernels.flight_device import FlightRing, begin, checked_flag, digest, end, key_part
from kernels.markov_sharded.layout import (
    ARRIVAL_WORD,
    CHUNKS,
    CLAIM_WORD,
    COMBINE_WORD,
    DTYPE_BYTES,
    END_WORD,
    HEAD_DIM,
    INDEX_BITS,
    INDEX_MASK,
    KEY_BITS,
    LAUNCH_WORD,
    MAX_RANKS,
    MAX_ROWS,
    MAX_STEPS,
    ROW_BYTES,
    STAGING_OFFSET,
    STAMP_WORD,
    STEP_STAMPS,
    TAG_BITS,
    TAG_MASK,
    TAG_PERIOD,
    THREADS,
    TILE_ROWS,
    VECTOR_BYTES,
    WARP,
    WARPS,
    record_offset,
    stamp_names,
)

KEY_MASK = (1 << KEY_BITS) - 1
# Shared words of a CTA's timeout state: gave up, claimed the rank's record,
# and what the claiming wait saw.
INFO_TIMED_OUT, INFO_CLAIMED, INFO_STEP, INFO_SOURCE, INFO_SEEN, INFO_ELAPSED_LO, INFO_ELAPSED_HI = range(7)
INFO_WORDS = 8
ROWS_PER_PASS = WARP // MAX_RANKS
# A warp's stream buffer: one head tile (``head_tile``'s slots).
STREAM_BYTES = stream_bytes(HEAD_DIM)


# ---------------------------------------------------------------------------
# Traced helpers (plain functions: straight-line code, inlined at trace time)
# ---------------------------------------------------------------------------


def _widen_bf16(bits: Uint32) -> Float32:
    """The FP32 value of the BF16 held in the low half of ``bits``."""
    return ptx.f32_from_bits(bits << Uint32(16))


def _candidate_key(score: Float32, index: Int32) -> Int64:
    """The 64-bit key ``ordered << 17 | (0x1FFFF - index)`` of an FP32 score."""
    bits = ptx.f32_bits(score)
    negative = bits >> Uint32(31)
    ordered = (bits ^ (Uint32(0) - negative)) | ((negative ^ Uint32(1)) << Uint32(31))
    return ((Int64(ordered) & 0xFFFFFFFF) << INDEX_BITS) | Int64(INDEX_MASK - index)


def _key_token(key: Int64) -> Int64:
    """The global vocab index a candidate key carries."""
    return Int64(INDEX_MASK) - (key & INDEX_MASK)


def _shuffle_xor_s64(value: Int64, lane_mask: int) -> Int64:
    """``shfl.sync.bfly`` of a 64-bit value (two 32-bit halves) from lane ``lane ^ lane_mask``."""
    lo = ptx.shfl_bfly_b32(Uint32(value & 0xFFFFFFFF), lane_mask)
    hi = ptx.shfl_bfly_b32(Uint32((value >> 32) & 0xFFFFFFFF), lane_mask)
    return (Int64(hi) << 32) | (Int64(lo) & 0xFFFFFFFF)


def _shuffle_idx_s64(value: Int64, source: Int32) -> Int64:
    """``shfl.sync.idx`` of a 64-bit value (two 32-bit halves) from lane ``source``."""
    lo = cute.arch.shuffle_sync(Uint32(value & 0xFFFFFFFF), source)
    hi = cute.arch.shuffle_sync(Uint32((value >> 32) & 0xFFFFFFFF), source)
    return (Int64(hi) << 32) | (Int64(lo) & 0xFFFFFFFF)


def _st_shared_s64(address: Int32, value: Int64) -> None:
    """Store a 64-bit value as two 32-bit shared words (low word first)."""
    ptx.st_shared_b32(address, Uint32(value & 0xFFFFFFFF))
    ptx.st_shared_b32(address + 4, Uint32((value >> 32) & 0xFFFFFFFF))


def _ld_shared_s64(address: Int32) -> Int64:
    """Load a 64-bit value stored by ``_st_shared_s64``."""
    lo = ptx.ld_shared_b32(address)
    hi = ptx.ld_shared_b32(address + 4)
    return (Int64(hi) << 32) | (Int64(lo) & 0xFFFFFFFF)


def _request_live(state: Int64, max_reqs: Int64) -> Int32:
    """1 when request index ``state`` lies in ``[0, max_reqs)``, else 0 (padding: nothing loaded or stored for it)."""
    return Int32((state >= 0) & (state < max_reqs))


def _peer_base(peers: Int64, peer, predicate: Int32) -> Int64:
    """Rank ``peer``'s buffer base from the device peer table (0 off the predicate)."""
    return ptx.ld_global_nc_b64(peers + Int64(peer) * 8, predicate)


# ---------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------


class ShardedMarkovSample(KernelVariant):
    """The sharded Markov chain for ``steps`` draft positions, base logits of
    ``base_dtype`` and a draft-logits cache of ``cache_dtype`` (``"bfloat16"``
    or ``"float32"``); see the module docstring."""

    def __init__(
        self, steps: int, base_dtype: str, cache_dtype: str, cooperative: bool = True, stamps: bool = False,
        l2_keep: float = 0.5, flight: bool = True,
    ) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
            raise ValueError(f"steps: expected an int in [1, {MAX_STEPS}], got {steps!r}")
        if not isinstance(cooperative, bool):
            raise TypeError(f"cooperative: expected a bool, got {cooperative!r}")
        # Cooperative launch only guarantees co-residency within one grid; for
        # ranks sharing a GPU the host passes False (see host.py).
        self.cooperative = cooperative
        if not isinstance(stamps, bool):
            raise TypeError(f"stamps: expected a bool, got {stamps!r}")
        # The bench-only phase stamps (module docstring), compiled in or not at all.
        self.stamps = stamps
        # The flight recorder's begin and end (kernels.flight), compiled in or not at all.
        self.flight = checked_flag(flight)
        self.stamp_count = len(stamp_names(steps))
        # The fraction of streamed-tile copies that carry an L2 evict_last
        # policy (0: no policy), so that part of the head streamed at every
        # step stays in L2 between steps. At world 1 (49 MB streamed per
        # step) 0.5 took the bench from 196.5 to 178.2 us; 0.4-0.7 measured
        # within 2% of it, 1.0 195.2 us (H200, rows 8, steps 8, vocab 129280).
        self.l2_keep = check_l2_keep(l2_keep)
        for name, dtype in (("base_dtype", base_dtype), ("cache_dtype", cache_dtype)):
            if dtype not in DTYPE_BYTES:
                raise ValueError(f"{name}: expected one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
        self.steps = steps
        self.base_bf16 = base_dtype == "bfloat16"
        self.cache_bf16 = cache_dtype == "bfloat16"
        self.cache_bytes = DTYPE_BYTES[cache_dtype]
        # One 16-byte vector holds this many cache elements; a tile row is
        # this many vectors.
        self.vector_elements = VECTOR_BYTES // self.cache_bytes
        self.tile_vectors = TILE_ROWS // self.vector_elements
        self.base_dtype, self.cache_dtype = base_dtype, cache_dtype

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        key = ("ShardedMarkovSample", f"s{self.steps}", self.base_dtype, self.cache_dtype,
               "coop" if self.cooperative else "plain")
        if self.l2_keep > 0.0:
            key += (f"keep{round(self.l2_keep * 100)}",)
        key += key_part(self.flight)
        return key + ("stamps",) if self.stamps else key

    @cute.jit
    def __call__(
        self,
        base_logits: Int64,  # [rows, steps, vocab or vocab_local] of base_dtype, vocab stride 1
        base_row_stride: Int64,  # elements
        base_step_stride: Int64,
        base_column: Int64,  # column of this rank's first vocab entry
        embed_table: Int64,  # BF16 [vocab, 256]
        head_shard: Int64,  # BF16 [vocab_local, 256], this rank's rows
        input_ids: Int64,  # int32; row r's anchor at [r * query_per_row]
        idx_mapping: Int64,  # int64 [rows * steps] request rows (negative: padding)
        temperature: Int64,  # FP32 [max_reqs]
        noise: Int64,  # FP32 at [r * steps + i][this rank's first column]
        noise_row_stride: Int64,  # elements
        logits_cache: Int64,  # [max_reqs, steps, vocab] of cache_dtype, vocab stride 1
        cache_stride0: Int64,
        cache_stride1: Int64,
        draft_tokens: Int64,  # int64 [rows, steps], contiguous
        peers: Int64,  # int64 [world] peer buffer bases
        control: Int64,  # this rank's control words
        diag: Int64,  # kernels.diag record (pinned host memory) or 0
        timeout_ns: Int64,  # 0: wait forever
        max_reqs: Int64,  # rows of temperature and logits_cache
        query_per_row: Int32,
        rank: Int32,
        world: Int32,
        vocab_local: Int32,
        rows: Int32,
        max_rows: Int32,
        ctas: Int32,
        flight_records: Int64,  # kernels.flight.FlightRecorder.args()
        flight_words: Int64,
        flight_mask: Int32,
        stream: cuda.CUstream,
    ):
        """Launch the chain as a grid of ``ctas`` CTAs of 512 threads (cooperative unless configured not to be)."""
        self.kernel(
            BaseLogits(base_logits, base_row_stride, base_step_stride, base_column), embed_table, head_shard,
            input_ids, idx_mapping, temperature, Rows(noise, noise_row_stride),
            LogitsCache(logits_cache, cache_stride0, cache_stride1), draft_tokens, peers, control, diag, timeout_ns,
            max_reqs, query_per_row, rank, world, vocab_local, rows, max_rows,
            FlightRing(flight_records, flight_words, flight_mask),
        ).launch(grid=(ctas, 1, 1), block=(THREADS, 1, 1), stream=stream, cooperative=self.cooperative)

    def _stamp(self, control: Int64, name: str, step=0) -> None:
        """With stamps compiled in, thread 0 stores ``%globaltimer`` as its CTA's stamp ``name`` (of ``step``
        for one of ``STEP_STAMPS``)."""
        if const_expr(self.stamps):
            thread, _, _ = cute.arch.thread_idx()
            cta, _, _ = cute.arch.block_idx()
            if const_expr(name in STEP_STAMPS):
                index = Int64(2 + STEP_STAMPS.index(name)) + Int64(step) * len(STEP_STAMPS)
            else:
                index = Int64(stamp_names(self.steps).index(name))
            at = control + STAMP_WORD * 4 + (Int64(cta) * self.stamp_count + index) * 8
            ptx.st_global_b64(at, ptx.globaltimer(), Int32(thread == 0))

    # -- per-tile epilogue ----------------------------------------------------

    def _load_base(self, base: BaseLogits, r, step, row, live) -> Float32:
        """Base logit of request row ``r``, ``step`` and shard row ``row``, widened to FP32 (0 off ``live``)."""
        element = Int64(r) * base.row_stride + Int64(step) * base.step_stride + base.column + Int64(row)
        if const_expr(self.base_bf16):
            return _widen_bf16(ptx.ld_global_nc(base.address + element * 2, 2, live)[0])
        return ptx.f32_from_bits(ptx.ld_global_nc(base.address + element * 4, 4, live)[0])

    @cute.jit
    def _tile_logits(
        self, acc0: Float32, acc1: Float32, acc2: Float32, acc3: Float32, tile: Int32, step: Int32, temp0: Float32,
        temp1: Float32, best: cute.Tensor, warp: Int32, g: Int32, t: Int32, rows: Int32, vocab_offset: Int32,
        tile_words: Int32, base_logits: BaseLogits, noise: Rows,
    ):
        """The tile's logits from its C fragment (``acc[2 half + col]``):
        cache bits into the warp's shared staging, each request row's best
        candidate key into ``best``. A loop over the lane's two request rows,
        not unrolled, so one row's loads are in flight at a time."""
        for col in cutlass.range(2, unroll=1):
            first = Int32(col == 0)
            r = 2 * t + col
            live = Int32(r < rows)
            temp = ptx.select_f32(first, temp0, temp1)
            noisy = ptx.nonzero_f32(temp)
            key = Int64(0)
            for half in cutlass.range_constexpr(2):
                sums = (acc0, acc1) if half == 0 else (acc2, acc3)
                row = tile * TILE_ROWS + g + 8 * half
                base = self._load_base(base_logits, r, step, row, live)
                noise_at = noise.address + (Int64(r * self.steps + step) * noise.row_stride + Int64(row)) * 4
                gumbel = ptx.f32_from_bits(ptx.ld_global_nc(noise_at, 4, live)[0])
                # The bias GEMM's BF16 output, then the eager add's FP32 sum
                # rounded once to the cache type.
                bias = _widen_bf16(bf16_bits(ptx.select_f32(first, sums[0], sums[1])))
                value = ptx.add_rn_f32(base, bias)
                if const_expr(self.cache_bf16):
                    bits = bf16_bits(value)
                    value = _widen_bf16(bits)
                else:
                    bits = ptx.f32_bits(value)
                ptx.st_shared_b32(tile_words + ((warp * MAX_ROWS + r) * TILE_ROWS + g + 8 * half) * 4, bits)
                noised = ptx.add_rn_f32(ptx.div_full_f32(value, temp), gumbel)
                score = ptx.select_f32(noisy, noised, value)
                key = ptx.max_s64(key, _candidate_key(score, vocab_offset + row))
            if col == 0:
                best[0] = ptx.max_s64(best[0], key)
            else:
                best[1] = ptx.max_s64(best[1], key)

    def _store_tile(self, tile, step, lanes, outputs) -> None:
        """The tile's cache elements as 16-byte vectors, one per lane and
        request row: into the local cache and every peer's staging buffer."""
        warp, lane, rows, vocab_offset, tile_words, rank, world = lanes
        idx_mapping, max_reqs, logits_cache, peers, staging_row0, vocab = outputs
        vec_row = lane // self.tile_vectors
        vec = lane - vec_row * self.tile_vectors
        live = Int32(lane < rows * self.tile_vectors)
        state = ptx.ld_global_nc_b64(idx_mapping + Int64(vec_row * self.steps + step) * 8, live)
        write = live & _request_live(state, max_reqs)
        source = tile_words + (((warp * MAX_ROWS + vec_row % MAX_ROWS) * TILE_ROWS) + vec * self.vector_elements) * 4
        if const_expr(self.cache_bf16):
            words = ptx.ld_shared_v4(source) + ptx.ld_shared_v4(source + 16)
            packed = [(words[2 * j] & Uint32(0xFFFF)) | (words[2 * j + 1] << Uint32(16)) for j in range(4)]
        else:
            packed = ptx.ld_shared_v4(source)
        element = Int64(vocab_offset + tile * TILE_ROWS + vec * self.vector_elements)
        cache_at = (state * logits_cache.request_stride + Int64(step) * logits_cache.step_stride + element)
        ptx.st_global(logits_cache.address + cache_at * self.cache_bytes, packed, VECTOR_BYTES, write)
        staged = (staging_row0 + Int64(vec_row * self.steps + step) * vocab + element) * self.cache_bytes
        self._store_to_peers(peers, rank, world, staged, write, packed[0], packed[1], packed[2], packed[3])

    @cute.jit
    def _store_to_peers(
        self, peers: Int64, rank: Int32, world: Int32, offset: Int64, write: Int32, w0: Uint32, w1: Uint32,
        w2: Uint32, w3: Uint32,
    ):
        """If ``write``, one 16-byte vector at ``offset`` of every peer's
        buffer (a loop, so one peer address is live at a time)."""
        for peer in cutlass.range(world, unroll=1):
            to_peer = write & Int32(peer != rank)
            ptx.st_global(_peer_base(peers, peer, to_peer) + offset, [w0, w1, w2, w3], VECTOR_BYTES, to_peer)

    def _process_tile(self, acc, tile, work) -> None:
        """One head tile of one step, given its C fragment: logits and keys, and its cache vectors."""
        step, temps, best, embedding_row, tile_lanes, tile_inputs, store_lanes, store_outputs = work
        self._tile_logits(*acc, tile, step, *temps, best, *tile_lanes, *tile_inputs)
        # Other lanes read the warp's shared staging; the next tile rewrites it.
        cute.arch.sync_warp()
        self._store_tile(tile, step, store_lanes, store_outputs)
        cute.arch.sync_warp()

    def _copy_tile(self, head_shard: Int64, tile: Int32, g: Int32, t: Int32, lane_stream: Int32) -> None:
        """Issue the copies of the lane's fragments of head tile ``tile`` into the warp's stream buffer."""
        policy = ptx.l2_evict_last_policy(self.l2_keep) if self.l2_keep > 0.0 else None
        copy_tile(head_shard, tile, g, t, lane_stream, HEAD_DIM, policy)

    @cute.jit
    def _streamed_bias(self, lane_stream: Int32, embedding_row: Int32, acc: cute.Tensor):
        """The C fragment of a streamed tile, from the warp's stream buffer
        into ``acc`` once its copies landed: the same 16 MMAs in the same
        order, a chunk per loop trip, so that only one chunk's fragments are
        live next to the resident tile."""
        ptx.cp_async_wait(0)
        for j in cutlass.range_constexpr(4):
            acc[j] = Float32(0.0)
        for chunk in cutlass.range(CHUNKS, unroll=1):
            lo, hi = slot_fragment(lane_stream, chunk)
            c = chunk_mma([acc[0], acc[1], acc[2], acc[3]], lo, hi, embedding_row, chunk)
            for j in cutlass.range_constexpr(4):
                acc[j] = c[j]

    # -- exchange ---------------------------------------------------------------

    @cute.jit
    def _await_record(
        self, address: Int64, tag: Uint32, timeout_ns: Int64, control: Int64, timeout_info: Int32, step: Int32,
        source: Int32,
    ) -> Int64:
        """Poll the mailbox record at ``address`` until it carries ``tag``;
        return its key. Past a positive ``timeout_ns`` (or once this CTA gave
        up on an earlier wait) return 0 instead and mark the CTA timed out;
        the first thread of the rank to claim ``CLAIM_WORD`` saves what it
        waited for in ``timeout_info`` for the record written at the end."""
        record = ptx.ld_ordered_b64(address, "relaxed", "sys")
        seen = Uint32(record & TAG_MASK)
        if seen != tag:
            gave_up = Int32(ptx.ld_shared_b32(timeout_info + INFO_TIMED_OUT * 4))
            start = ptx.globaltimer()
            while (seen != tag) & (gave_up == 0):
                record = ptx.ld_ordered_b64(address, "relaxed", "sys")
                seen = Uint32(record & TAG_MASK)
                if timeout_ns > 0:
                    elapsed = ptx.globaltimer() - start
                    if elapsed > timeout_ns:
                        gave_up = Int32(1)
                        ptx.st_shared_b32(timeout_info + INFO_TIMED_OUT * 4, Uint32(1))
                        claimed = ptx.atom_add_u32(control + CLAIM_WORD * 4, Uint32(1), "relaxed", "gpu")
                        if claimed == Uint32(0):
                            for field, value in (
                                (INFO_CLAIMED, Uint32(1)), (INFO_STEP, Uint32(step)), (INFO_SOURCE, Uint32(source)),
                                (INFO_SEEN, seen), (INFO_ELAPSED_LO, Uint32(elapsed & 0xFFFFFFFF)),
                                (INFO_ELAPSED_HI, Uint32((elapsed >> 32) & 0xFFFFFFFF)),
                            ):
                                ptx.st_shared_b32(timeout_info + field * 4, value)
            if gave_up != 0:
                record = Int64(0)
        return (record >> TAG_BITS) & KEY_MASK

    @cute.jit
    def _report_timeout(
        self, timeout_info: Int32, diag: Int64, rank: Int32, launches: Uint32, tag: Uint32, timeout_ns: Int64
    ):
        """If this CTA's thread claimed a timed-out wait, commit its diagnostic record, print it and trap."""
        if ptx.ld_shared_b32(timeout_info + INFO_CLAIMED * 4) != Uint32(0):
            elapsed = (Int64(ptx.ld_shared_b32(timeout_info + INFO_ELAPSED_HI * 4)) << 32) | (
                Int64(ptx.ld_shared_b32(timeout_info + INFO_ELAPSED_LO * 4)) & 0xFFFFFFFF
            )
            if diag != 0:
                write_diag_and_trap(
                    diag, rank, Int32(launches), Int32(ptx.ld_shared_b32(timeout_info + INFO_STEP * 4)),
                    Int32(ptx.ld_shared_b32(timeout_info + INFO_SOURCE * 4)), tag,
                    ptx.ld_shared_b32(timeout_info + INFO_SEEN * 4), Int32(int(WaitKind.MAILBOX_TAG)), elapsed,
                    timeout_ns,
                )
            ptx.trap()

    @cute.jit
    def _exchange(
        self, lane: Int32, step: Int32, last_step: Int32, rows: Int32, max_rows: Int32, ctas: Int32, rank: Int32,
        world: Int32, warp_best: Int32, winner: Int32, control: Int64, peers: Int64, own_buffer: Int64,
        tag: Uint32, parity: Int32, timeout_ns: Int64, timeout_info: Int32,
    ):
        """Warp 0 of a CTA: fold the CTA's best keys into the rank-local
        maximum, post (last CTA) and await every rank's records; the winning
        key of each row goes to ``winner`` in shared memory."""
        combine = control + COMBINE_WORD * 4 + Int64(step * MAX_ROWS + lane) * 8
        arrivals = control + ARRIVAL_WORD * 4 + Int64(step) * 4
        if lane < rows:
            key = Int64(0)
            # A loop, not unrolled: one warp's key is live at a time.
            for w in cutlass.range(WARPS, unroll=1):
                key = ptx.max_s64(key, _ld_shared_s64(warp_best + (w * MAX_ROWS + lane) * 8))
            ptx.atom_b64(combine, key, "max.u64")
        cute.arch.sync_warp()
        arrived = Uint32(0)
        if lane == 0:
            # The last step's system fence also publishes every peer staging
            # store this CTA made before its arrival is counted.
            if last_step != 0:
                ptx.fence("membar.sys")
            else:
                ptx.fence("membar.gl")
            arrived = ptx.atom_add_u32(arrivals, Uint32(1), "acq_rel", "gpu")
        arrived = cute.arch.shuffle_sync(arrived, 0)
        # A CTA that gave up waiting posts nothing more: its keys are not the rank's.
        timed_out = ptx.ld_shared_b32(timeout_info + INFO_TIMED_OUT * 4)
        if (arrived == Uint32(ctas - 1)) & (timed_out == Uint32(0)):
            if lane == 0:
                ptx.fence("membar.gl")
            cute.arch.sync_warp()
            rank_key = Int64(0)
            if lane < rows:
                rank_key = ptx.atom_b64(combine, Int64(0), "exch.b64")
            if lane == 0:
                ptx.st_ordered_b32(arrivals, Uint32(0), "relaxed", "gpu")
            if last_step != 0:
                ptx.fence("membar.sys")
            for half in cutlass.range_constexpr(2):
                row = half * ROWS_PER_PASS + lane // MAX_RANKS
                target = lane % MAX_RANKS
                mine = _shuffle_idx_s64(rank_key, row)
                slot = record_offset(parity, step, row, rank)
                if (target < world) & (row < max_rows):
                    ptx.st_ordered_b64(
                        _peer_base(peers, target, Int32(1)) + Int64(slot), (mine << TAG_BITS) | Int64(tag),
                        "relaxed", "sys",
                    )
        self._stamp(control, "fold", step)
        # A loop, not unrolled: one polling loop in the code.
        for half in cutlass.range(2, unroll=1):
            row = half * ROWS_PER_PASS + lane // MAX_RANKS
            source = lane % MAX_RANKS
            found = Int64(0)
            if (source < world) & (row < rows):
                slot = record_offset(parity, step, row, source)
                found = self._await_record(own_buffer + Int64(slot), tag, timeout_ns, control, timeout_info, step, source)
            for level in cutlass.range_constexpr(3):
                found = ptx.max_s64(found, _shuffle_xor_s64(found, 1 << level))
            if (source == 0) & (row < rows):
                _st_shared_s64(winner + row * 8, found)
        if last_step != 0:
            # Acquire side of the peers' staging stores (copied after the loop).
            ptx.fence("membar.sys")

    # -- the kernel ---------------------------------------------------------------

    @cute.kernel
    def kernel(
        self, base_logits: BaseLogits, embed_table: Int64, head_shard: Int64, input_ids: Int64, idx_mapping: Int64,
        temperature: Int64, noise: Rows, logits_cache: LogitsCache, draft_tokens: Int64, peers: Int64,
        control: Int64, diag: Int64, timeout_ns: Int64, max_reqs: Int64, query_per_row: Int32, rank: Int32,
        world: Int32, vocab_local: Int32, rows: Int32, max_rows: Int32, ring: FlightRing,
    ):
        """One CTA of 16 warps; see the module docstring."""
        self._stamp(control, "start")
        steps = self.steps
        cache_bytes = self.cache_bytes
        thread, cta, ctas, warp, lane, g, t = thread_coordinates()
        tiles = vocab_local // TILE_ROWS
        first_tile = cta * WARPS + warp
        vocab_offset = rank * vocab_local
        vocab = Int64(vocab_local) * Int64(world)

        smem = SmemAllocator()
        embedding = smem.allocate(MAX_ROWS * ROW_BYTES, byte_alignment=16).toint()
        tile_words = smem.allocate(WARPS * MAX_ROWS * TILE_ROWS * 4, byte_alignment=16).toint()
        warp_best = smem.allocate(WARPS * MAX_ROWS * 8, byte_alignment=16).toint()
        winner = smem.allocate(MAX_ROWS * 8, byte_alignment=16).toint()
        counter = smem.allocate(16, byte_alignment=16).toint()
        timeout_info = smem.allocate(INFO_WORDS * 4, byte_alignment=16).toint()
        stream = smem.allocate(WARPS * STREAM_BYTES, byte_alignment=128).toint()

        # The resident tile, read once per launch.
        resident = Int32(first_tile < tiles)
        resident_row = head_shard + Int64(first_tile * TILE_ROWS + g) * ROW_BYTES + Int64(t * 16)
        resident_lo, resident_hi = [], []
        for chunk in cutlass.range_constexpr(CHUNKS):
            resident_lo.append(ptx.ld_global_nc(resident_row + chunk * 64, 16, resident))
            resident_hi.append(ptx.ld_global_nc(resident_row + 8 * ROW_BYTES + chunk * 64, 16, resident))
        # The warp's first streamed tile is in flight from here to step 0's use.
        stride = ctas * WARPS
        first_streamed = first_tile + stride
        lane_stream = stream + warp * STREAM_BYTES + lane * VECTOR_BYTES
        if first_streamed < tiles:
            self._copy_tile(head_shard, first_streamed, g, t, lane_stream)

        if thread == 0:
            launch_word = ptx.ld_volatile_global(control + LAUNCH_WORD * 4, 4, Int32(1))[0]
            ptx.st_shared_b32(counter, launch_word)
            begin(self.flight, ring, flight_ident("markov_sharded", "sample"), 0, (
                Uint32(1) + launch_word % Uint32(TAG_PERIOD), launch_word & Uint32(1), rows, Uint32(steps),
                digest([query_per_row, world, vocab_local, rows, max_rows]), Uint32(0)))
        if thread < INFO_WORDS:
            ptx.st_shared_b32(timeout_info + thread * 4, Uint32(0))
        if warp < MAX_ROWS:
            # Rows past `rows` keep zero embeddings; an anchor outside the
            # vocabulary (the host rejects it) is clamped to stay in bounds.
            anchor_live = Int32(warp < rows)
            anchor = Int64(Int32(ptx.ld_global_nc(input_ids + Int64(warp * query_per_row) * 4, 4, anchor_live)[0]))
            token = ptx.min_u64(anchor, vocab - 1)
            words = ptx.ld_global_nc(embed_table + token * ROW_BYTES + Int64(lane * 16), 16, anchor_live)
            ptx.st_shared_v4(embedding + warp * ROW_BYTES + lane * 16, words)
        cute.arch.barrier()
        self._stamp(control, "setup")
        launches = ptx.ld_shared_b32(counter)
        tag = Uint32(1) + launches % Uint32(TAG_PERIOD)
        parity = Int32(launches & Uint32(1))
        own_buffer = _peer_base(peers, rank, Int32(1))
        # Staging elements of this launch's parity: [max_rows][steps][vocab].
        staging_row0 = Int64(STAGING_OFFSET // cache_bytes) + Int64(parity * max_rows * steps) * vocab
        embedding_row = embedding + g * ROW_BYTES + t * 16

        tile_lanes = (warp, g, t, rows, vocab_offset, tile_words)
        tile_inputs = (base_logits, noise)
        store_lanes = (warp, lane, rows, vocab_offset, tile_words, rank, world)
        best = cute.make_rmem_tensor((2,), Int64)
        acc = cute.make_rmem_tensor((4,), Float32)
        for step in cutlass.range(steps, unroll=1):
            last_step = Int32(step + 1 == steps)
            temps = []
            for col in cutlass.range_constexpr(2):
                r = 2 * t + col
                live = Int32(r < rows)
                state = ptx.ld_global_nc_b64(idx_mapping + Int64(r * steps + step) * 8, live)
                active = live & _request_live(state, max_reqs)
                temps.append(ptx.f32_from_bits(ptx.ld_global_nc(temperature + state * 4, 4, active)[0]))
            store_outputs = (idx_mapping, max_reqs, logits_cache, peers, staging_row0, vocab)
            best[0] = Int64(0)
            best[1] = Int64(0)
            work = (step, temps, best, embedding_row, tile_lanes, tile_inputs, store_lanes, store_outputs)
            # One epilogue for every tile: the resident one (first) from
            # registers, tiles beyond one per warp (small grids) from L2.
            for tile in cutlass.range(first_tile, tiles, stride, unroll=1):
                if tile == first_tile:
                    resident_acc = tile_bias(lambda c: (resident_lo[c], resident_hi[c]), embedding_row, HEAD_DIM)
                    for j in cutlass.range_constexpr(4):
                        acc[j] = resident_acc[j]
                else:
                    self._streamed_bias(lane_stream, embedding_row, acc)
                    # The MMAs consumed the buffer (in-order issue: they waited
                    # for its loads), so the warp's next streamed tile goes in
                    # now: this step's next one, else the next step's first
                    # (the head is the same at every step; only the embeddings
                    # change).
                    following = tile + stride
                    if following >= tiles:
                        following = first_streamed + Int32(step + 1 >= steps) * tiles
                    if following < tiles:
                        self._copy_tile(head_shard, following, g, t, lane_stream)
                self._process_tile([acc[j] for j in range(4)], tile, work)
                if const_expr(self.stamps):
                    if tile == first_tile:
                        self._stamp(control, "resident", step)

            # Each request row's best key over the lanes sharing t, then the CTA.
            for col in cutlass.range_constexpr(2):
                key = best[col]
                for level in cutlass.range_constexpr(3):
                    key = ptx.max_s64(key, _shuffle_xor_s64(key, 4 << level))
                if g == 0:
                    _st_shared_s64(warp_best + (warp * MAX_ROWS + 2 * t + col) * 8, key)
            cute.arch.barrier()
            self._stamp(control, "streamed", step)
            if warp == 0:
                self._exchange(
                    lane, step, last_step, rows, max_rows, ctas, rank, world, warp_best, winner, control, peers,
                    own_buffer, tag, parity, timeout_ns, timeout_info,
                )
            cute.arch.barrier()
            self._stamp(control, "wait", step)
            if cta == 0:
                if thread < rows:
                    token = _key_token(_ld_shared_s64(winner + thread * 8))
                    ptx.st_global_b64(draft_tokens + Int64(thread * steps + step) * 8, token, Int32(1))
            if step + 1 < steps:
                if warp < rows:
                    token = ptx.min_u64(_key_token(_ld_shared_s64(winner + warp * 8)), vocab - 1)
                    words = ptx.ld_global_nc(embed_table + token * ROW_BYTES + Int64(lane * 16), 16, Int32(1))
                    ptx.st_shared_v4(embedding + warp * ROW_BYTES + lane * 16, words)
            cute.arch.barrier()
            self._stamp(control, "next", step)

        # The peers' shards are in this rank's staging buffer: copy them into
        # the cache, 16 bytes per task.
        vectors = vocab_local * cache_bytes // VECTOR_BYTES
        per_row_step = (world - 1) * vectors
        total = rows * steps * per_row_step
        for task in cutlass.range(cta * THREADS + thread, total, ctas * THREADS, unroll=1):
            row_step = task // per_row_step
            within = task - row_step * per_row_step
            source = within // vectors
            source_vector = within - source * vectors
            source = source + Int32(source >= rank)
            state = ptx.ld_global_nc_b64(idx_mapping + Int64(row_step) * 8, Int32(1))
            keep = _request_live(state, max_reqs)
            element = Int64(source) * Int64(vocab_local) + Int64(source_vector * self.vector_elements)
            staged = (staging_row0 + Int64(row_step) * vocab + element) * cache_bytes
            words = ptx.ld_global_cg(own_buffer + staged, VECTOR_BYTES, keep)
            cache_at = (state * logits_cache.request_stride + Int64(row_step % steps) * logits_cache.step_stride
                        + element) * cache_bytes
            ptx.st_global(logits_cache.address + cache_at, words, VECTOR_BYTES, keep)

        # Here, with the resident tile dead, a claimed timeout is reported.
        cute.arch.barrier()
        self._stamp(control, "copy")
        if thread == 0:
            self._report_timeout(timeout_info, diag, rank, launches, tag, timeout_ns)
            ptx.fence("membar.gl")
            previous = ptx.atom_add_u32(control + END_WORD * 4, Uint32(1), "acq_rel", "gpu")
            if previous == Uint32(ctas - 1):
                ptx.st_ordered_b32(control + END_WORD * 4, Uint32(0), "relaxed", "gpu")
                ptx.st_ordered_b32(control + LAUNCH_WORD * 4, launches + Uint32(1), "relaxed", "gpu")
                end(self.flight, ring, 0, Int32(1))
        self._stamp(control, "end")


__all__ = ["ShardedMarkovSample"]
