"""Lamport mHC consumer: wait for a token's fragments, reduce, mix, collapse, normalize.

Grid ``(clusters, cluster, 1)``, cluster ``(1, cluster, 1)``, ``threads``
threads per CTA (``layout.norm_layout``): one cluster per token, or, when the
host gives fewer clusters than rows (virtual ranks sharing one GPU must all
stay resident), cluster ``b`` takes tokens ``b, b + clusters, ...``. Fragment ``f`` (16 bytes,
elements ``8f .. 8f+7``) belongs to CTA ``(f % (cluster*threads)) // threads``,
thread ``f % threads``, trip ``f // (cluster*threads)``.

Loads ahead of the dependency (as seed 004): the norm weight, and the first
token's residual streams (every trip's fragments), ``post``, ``comb`` and
``pre`` are the caller's, written before the publish launched (the publish
waited for its producer), so they are read before ``griddepcontrol.wait``
and overlap the wait for the publish; only the mailbox and the generation
state depend on it. A cluster that walks several tokens loads the next
token's after it finishes one. They sit in register tensors
between the load and their use (``mixes``, ``streams``).

The dependency itself. The publish launches this grid once every one of
its threads has read ``NEXT`` (``kernels.allreduce_mhc.publish``, "Launch
order"), not when it completes. LL reads ``g = state[NEXT]`` at once and
does not wait for the publish before polling: its own rank's fragments
arrive through the mailbox like every peer's, and the sentinel says when
they are there; it executes ``griddepcontrol.wait`` only before it advances
``NEXT``, so the publish (its ``ACTIVE`` store included) has completed
before the generation moves on and before this grid completes. BT reads
``g = state[ACTIVE]`` after ``griddepcontrol.wait`` (the owner reduce set
it and filled ``reduced[g]``).

Per fragment:

1. Poll (``ld.volatile``, 16 bytes) until no half is the sentinel 0x8000:
   LL: the ``tp`` slots ``mailbox[g][source][token]``; BT (``reduced_input``):
   the one slot ``reduced[g][token]`` the owner ``token % tp`` fanned out.
2. Reduce (LL): ``s = +0.0; s = s + f32(slot_r)`` for ``r = 0 .. tp-1``
   (``add.rn.f32``), ``reduced = bf16_rn(s)``; BT's owner already did exactly
   this, so both protocols give the same bits.
3. mHC post (``golden/allreduce_mhc/mhc.py``): ``m = reduced * post[j]`` (``mul.rn``), then
   ``m = fma(res[i], comb[i, j], m)`` for ``i = 0 .. hc-1``; ``out[j] =
   bf16_rn(m)`` is stored as ``residual_out[token, j]``.
4. Collapse: ``c = +0.0; c = fma(out[j], pre[j], c)`` for ``j = 0 .. hc-1``;
   ``prenorm = bf16_rn(c)``.
5. The sentinel is written back over every slot read. After the last token,
   LL, after ``griddepcontrol.wait``: CTA 0 of cluster 0, thread 0, sets
   ``state[NEXT] = (g + 1) % 3``; then
   ``griddepcontrol.launch_dependents`` (the next publish still waits for this
   grid to finish).
6. RMSNorm (``golden/allreduce_mhc/rmsnorm.py``): per trip ``s = fma(p, p, s)`` over the 8
   elements from +0.0; per thread the trips added in order; warp butterfly
   ``xor 1, 2, 4, 8, 16``; warp 0 reduces the warp sums (``+0.0`` past the
   last warp) with butterfly ``xor 16 .. 1``; its lanes ``c < cluster`` store
   the CTA sum into CTA ``c``'s shared slot (``st.shared::cluster``; two slot
   sets alternate between consecutive tokens); after the cluster barrier
   (release/acquire) every thread adds the ``cluster`` sums in CTA order.
   ``inv = f32(1 / sqrt(f64(sum / H) + f64(eps)))`` with IEEE FP64 ops (the
   division ``sum / H`` is ``div.rn.f32``), ``y = bf16_rn((p * inv) * weight)``.
7. MXFP8 (``output="mxfp8"``, ``golden/allreduce_mhc/mxfp8.py``): a 32-value block is four
   adjacent threads; ``amax`` by integer max of ``|y|``'s bits over the quad;
   ``e`` = UE8M0 round-up of ``amax * f32(1/448)`` (integer ops on the bits on
   SM90, ``cvt.rp.satfinite.ue8m0x2.f32`` on SM100+, both at most 254); values
   ``cvt.rn.satfinite.e4m3x2.f32(y * m)`` with ``m`` the FP32 of bits
   ``(254 - e) << 23``, i.e. ``2^(127-e)``, and ``+0.0`` for ``e = 254``, which
   only a block holding a NaN or Inf reaches (its NaN and Inf elements become
   the E4M3 NaN 0x7F, its finite ones signed zeros: ``golden/allreduce_mhc/mxfp8.py`` item
   5); the four scale bytes of a
   128x4 tile word are OR-ed across 16 lanes and stored as one word at the
   swizzled index. Padding rows ``M .. round_up(M, 128)`` get zero scale words
   from a grid-stride loop.

``output="residual"`` stops after step 5 (no pre-mix, weight or layer input).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint32

from kernels import ptx
from kernels.flight import ident as flight_ident
from kernels.flight_device import FlightRing, begin, digest, end, key_part, take
from kernels.allreduce_mhc import device
from kernels.allreduce_mhc.arguments import TokenInputs, TokenOutputs, WaitDeadline
from kernels.allreduce_mhc.kernel_shape import AllReduceKernel, check_choice
from kernels.allreduce_mhc.layout import (
    ACTIVE,
    GENERATIONS,
    HC_MAX,
    MAX_CLUSTER,
    MXFP8_BLOCK,
    NEXT,
    SCALE_TILE_COLS,
    SCALE_TILE_ROWS,
    VEC,
    VEC_BYTES,
    WARP,
    NormLayout,
    mxfp8_padded_cols,
    norm_layout,
)

OUTPUTS = ("plain", "mxfp8", "residual")
ARCHS = ("sm_90a", "sm_100a")
FRAGMENTS_PER_SCALE_WORD = MXFP8_BLOCK * SCALE_TILE_COLS // VEC


class LamportMHCConsumer(AllReduceKernel):
    """The mHC consumer of one protocol (LL or BT) and one output variant."""

    def __init__(
        self,
        *,
        hidden: int,
        hc: int,
        tp: int,
        capacity: int,
        reduced_input: bool,
        output: str,
        arch: str,
        layout: NormLayout | None = None,
        flight: bool = True,
    ) -> None:
        check_choice("output", output, OUTPUTS)
        check_choice("arch", arch, ARCHS)
        if not 1 <= hc <= HC_MAX:
            raise ValueError(f"hc must be in [1, {HC_MAX}], got {hc}")
        self.keep_shape(hidden, tp, capacity, flight)
        if output == "mxfp8" and hidden % (MXFP8_BLOCK * SCALE_TILE_COLS):
            raise ValueError(f"MXFP8 output needs hidden % {MXFP8_BLOCK * SCALE_TILE_COLS} == 0, got {hidden}")
        self.layout = norm_layout(hidden) if layout is None else layout
        if self.layout.threads % WARP or not 1 <= self.layout.cluster <= MAX_CLUSTER:
            raise ValueError(
                f"layout must have a warp multiple of threads and 1..{MAX_CLUSTER} CTAs, got {self.layout}"
            )
        self.hc = hc
        self.reduced_input = reduced_input
        self.output = output
        self.arch = arch
        self.cluster = self.layout.cluster
        self.threads = self.layout.threads
        self.warps = self.layout.warps
        self.trips = self.layout.trips(hidden)
        self.sources = 1 if reduced_input else tp
        self.scale_cols = mxfp8_padded_cols(hidden)

    def key(self) -> tuple:
        """The configuration that identifies a compiled variant."""
        return ("consumer", self.hidden, self.hc, self.tp, self.capacity, self.reduced_input, self.output, self.arch,
                self.cluster, self.threads) + key_part(self.flight)

    @cute.jit
    def __call__(
        self,
        mailbox: Int64,
        residual: Int64,
        post: Int64,
        comb: Int64,
        pre: Int64,
        weight: Int64,
        residual_out: Int64,
        norm_out: Int64,
        mx_values: Int64,
        mx_scales: Int64,
        state: Int64,
        eps: Float32,
        timeout_ns: Int64,
        diag: Int64,
        rank: Int32,
        launch: Int32,
        m: Int32,
        clusters: Int32,
        flight_records: Int64, flight_words: Int64, flight_mask: Int32,  # kernels.flight.FlightRecorder.args()
        stream: cuda.CUstream,
    ) -> None:
        """Launch ``clusters`` clusters of ``cluster`` CTAs, programmatic dependent launch."""
        inputs = TokenInputs(residual, post, comb, pre, weight)
        outputs = TokenOutputs(residual_out, norm_out, mx_values, mx_scales)
        self.launch_pdl(
            (mailbox, inputs, outputs, state, eps, WaitDeadline(timeout_ns, diag, rank, launch), m),
            (flight_records, flight_words, flight_mask), (clusters, self.cluster, 1), stream,
            cluster=(1, self.cluster, 1), smem=(self.warps + 2 * self.cluster) * 4,
        )

    def slot_element(self, generation: Int64, source: int, token, fragment) -> Int64:
        """Mailbox element of a fragment: source ``source``'s (LL) or the reduced sum's (BT)."""
        if cutlass.const_expr(self.reduced_input):
            slot = generation * self.capacity + Int64(token)
        else:
            slot = (generation * self.tp + source) * self.capacity + Int64(token)
        return slot * self.hidden + Int64(fragment) * VEC

    def load_f32(self, base: Int64, index, live: Int32) -> Float32:
        """One FP32 input element ``base[index]`` (0.0 off ``live``)."""
        return ptx.f32_from_bits(ptx.ld_global(base + Int64(index) * 4, 4, live)[0])

    def mix_slots(self) -> int:
        """FP32 words of one token's mixes in ``TokenLoads.mixes``: post ``[hc]``, comb ``[hc, hc]``, pre ``[hc]``."""
        return self.hc * (self.hc + 2)

    @cute.jit
    def load_token(self, token, live: Int32, fragments, valid, inputs: TokenInputs, mixes: cute.Tensor,
                   streams: cute.Tensor):
        """Token ``token``'s mixes into ``mixes`` and its residual fragments (BF16 words ``[trip][source][4]``)
        into ``streams``; nothing is read off ``live`` (past the last token)."""
        hc = self.hc
        for j in cutlass.range_constexpr(hc):
            mixes[j] = self.load_f32(inputs.post, Int64(token) * hc + j, live)
            if cutlass.const_expr(self.output != "residual"):
                mixes[hc + hc * hc + j] = self.load_f32(inputs.pre, Int64(token) * hc + j, live)
            for i in cutlass.range_constexpr(hc):
                mixes[hc + i * hc + j] = self.load_f32(inputs.comb, (Int64(token) * hc + i) * hc + j, live)
        for trip in cutlass.range_constexpr(self.trips):
            element = Int64(fragments[trip]) * VEC
            for source in cutlass.range_constexpr(hc):
                address = inputs.residual + ((Int64(token) * hc + source) * self.hidden + element) * 2
                words = ptx.ld_global(address, VEC_BYTES, Int32(valid[trip]) & live)
                for word in cutlass.range_constexpr(4):
                    streams[(trip * hc + source) * 4 + word] = words[word]

    @cute.jit
    def butterfly_sum(self, value: Float32, offsets: cutlass.Constexpr):
        """``value = value + shfl_xor(value, o)`` for each ``o`` in ``offsets`` (full warp)."""
        for offset in cutlass.range_constexpr(len(offsets)):
            partner = ptx.f32_from_bits(ptx.shfl_bfly_b32(ptx.f32_bits(value), offsets[offset]))
            value = ptx.add_rn_f32(value, partner)
        return value

    @cute.jit
    def scale_index(self, row, column) -> Int64:
        """Byte index of scale (row, column) in the swizzled 128x4 layout."""
        row64 = Int64(row)
        column64 = Int64(column)
        return (
            column64 % 4
            + (column64 // 4) * 512
            + (row64 % 32) * 16
            + ((row64 % SCALE_TILE_ROWS) // 32) * 4
            + (row64 // SCALE_TILE_ROWS) * SCALE_TILE_ROWS * self.scale_cols
        )

    @cute.kernel
    def kernel(self, mailbox: Int64, inputs: TokenInputs, outputs: TokenOutputs, state: Int64, eps: Float32,
               deadline: WaitDeadline, m: Int32, ring: FlightRing):
        """Walk this cluster's tokens, then (LL) advance NEXT, release the dependents, zero padding scales."""
        tidx, _, _ = cute.arch.thread_idx()
        first_token, _, _ = cute.arch.block_idx()
        clusters, _, _ = cute.arch.grid_dim()
        cta = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        fragments = [cta * self.threads + tidx + trip * self.cluster * self.threads for trip in range(self.trips)]
        valid = [fragments[trip] < self.fragments for trip in range(self.trips)]

        # The norm weight is the caller's, written before the publish: safe to
        # read before the dependency wait (the publish waited for its producer).
        weights = []
        if cutlass.const_expr(self.output != "residual"):
            for trip in cutlass.range_constexpr(self.trips):
                address = inputs.weight + Int64(fragments[trip]) * VEC * 2
                weights.append(device.bf16_words_to_f32(ptx.ld_global(address, VEC_BYTES, Int32(valid[trip]))))

        mixes = cute.make_rmem_tensor((self.mix_slots(),), Float32)
        streams = cute.make_rmem_tensor((self.trips * self.hc * 4,), Uint32)
        self.load_token(first_token, Int32(first_token < m), fragments, valid, inputs, mixes, streams)

        flight_launch = take(self.flight, ring, 2)
        if cutlass.const_expr(self.reduced_input):
            cute.arch.griddepcontrol_wait()
            generation = ptx.ld_volatile_b32_or(state + ACTIVE * 4, Int32(1), Uint32(0))
        else:
            # The publish launched this grid only after every one of its
            # threads had read NEXT, past its own wait for the consumer that
            # last advanced it: NEXT is this call's generation, and the
            # sentinel, not the publish's completion, says when data is there.
            generation = ptx.ld_volatile_b32_or(state + NEXT * 4, Int32(1), Uint32(0))
        begin(self.flight, ring, flight_ident("allreduce_mhc", "consumer", "bt" if self.reduced_input else "ll"), 2,
              (generation, Uint32(0), m, Uint32(0), digest([m, ptx.f32_bits(eps)]), Uint32(OUTPUTS.index(self.output))),
              launch=flight_launch)

        # A grid of fewer clusters than tokens (virtual ranks sharing one GPU
        # must all stay resident) walks the tokens; the parity alternates the
        # cluster's shared slots between consecutive tokens.
        token = first_token
        parity = Int32(0)
        while token < m:
            self.consume_token(token, parity, cta, tidx, fragments, valid, weights, generation, mailbox, mixes,
                               streams, outputs, eps, deadline)
            token = token + clusters
            parity = parity ^ Int32(1)
            self.load_token(token, Int32(token < m), fragments, valid, inputs, mixes, streams)

        if cutlass.const_expr(not self.reduced_input):
            # The publish has completed (its ACTIVE store included) before
            # NEXT moves on, and this grid completes after it, as the next
            # kernel in the stream expects of its predecessor.
            cute.arch.griddepcontrol_wait()
            advance = (first_token == 0) & (cta == 0) & (tidx == 0)
            next_generation = (generation + Uint32(1)) % Uint32(GENERATIONS)
            ptx.st_global(state + NEXT * 4, [next_generation], 4, Int32(advance))
        cute.arch.griddepcontrol_launch_dependents()
        if cutlass.const_expr(self.output == "mxfp8"):
            self.zero_padding_scales(m, first_token, cta, tidx, outputs.mx_scales)
        end(self.flight, ring, 2, launch=flight_launch)

    @cute.jit
    def consume_token(self, token, parity, cta, tidx, fragments, valid, weights, generation, mailbox: Int64,
                      mixes: cute.Tensor, loaded: cute.Tensor, outputs: TokenOutputs, eps: Float32,
                      deadline: WaitDeadline):
        """Steps 1-7 for one token whose inputs ``load_token`` loaded: poll, reduce, mix, collapse, scrub its
        slots, normalize."""
        hc = self.hc
        write_norm = self.output != "residual"
        generation64 = Int64(generation)
        post_mix = [mixes[j] for j in range(hc)]
        comb_mix = [[mixes[hc + i * hc + j] for j in range(hc)] for i in range(hc)]
        pre_mix = []
        if cutlass.const_expr(write_norm):
            pre_mix = [mixes[hc + hc * hc + j] for j in range(hc)]

        prenorm = []
        for trip in cutlass.range_constexpr(self.trips):
            element = Int64(fragments[trip]) * VEC
            streams = [device.bf16_words_to_f32([loaded[(trip * hc + source) * 4 + word] for word in range(4)])
                       for source in range(hc)]
            addresses = [
                mailbox + self.slot_element(generation64, source, token, fragments[trip]) * 2
                for source in range(self.sources)
            ]
            awaited = [token % self.tp] if self.reduced_input else list(range(self.tp))
            words = device.poll_fragments(addresses, awaited, valid[trip], deadline, Int32(token), generation)
            total = [Float32(0.0)] * VEC
            for source in cutlass.range_constexpr(self.sources):
                values = device.bf16_words_to_f32(words[4 * source : 4 * source + 4])
                for e in cutlass.range_constexpr(VEC):
                    total[e] = ptx.add_rn_f32(total[e], values[e])
            reduced, _ = device.round_to_bf16(total)

            collapse = [Float32(0.0)] * VEC
            for target in cutlass.range_constexpr(hc):
                mixed = [ptx.mul_rn_f32(reduced[e], post_mix[target]) for e in range(VEC)]
                for source in cutlass.range_constexpr(hc):
                    for e in cutlass.range_constexpr(VEC):
                        mixed[e] = ptx.fma_rn_f32(streams[source][e], comb_mix[source][target], mixed[e])
                mixed_values, mixed_words = device.round_to_bf16(mixed)
                out_element = (Int64(token) * hc + target) * self.hidden + element
                ptx.st_global(outputs.residual_out + out_element * 2, mixed_words, VEC_BYTES, Int32(valid[trip]))
                if cutlass.const_expr(write_norm):
                    for e in cutlass.range_constexpr(VEC):
                        collapse[e] = ptx.fma_rn_f32(mixed_values[e], pre_mix[target], collapse[e])
            if cutlass.const_expr(write_norm):
                rounded, _ = device.round_to_bf16(collapse)
                prenorm.append(rounded)
            # Read and consumed: the slots are empty again for the call three generations on.
            for address in addresses:
                ptx.st_global(address, device.sentinel_fragment(), VEC_BYTES, Int32(valid[trip]))

        if cutlass.const_expr(write_norm):
            self.normalize(prenorm, weights, fragments, valid, token, parity, cta, tidx, eps, outputs)

    @cute.jit
    def normalize(self, prenorm, weights, fragments, valid, token, parity, cta, tidx, eps: Float32,
                  outputs: TokenOutputs):
        """Steps 6-7: the cluster-wide sum of squares, the normalized output and its MXFP8."""
        lane = tidx % WARP
        warp = tidx // WARP
        thread_sum = Float32(0.0)
        for trip in cutlass.range_constexpr(self.trips):
            fragment_sum = Float32(0.0)
            for e in cutlass.range_constexpr(VEC):
                fragment_sum = ptx.fma_rn_f32(prenorm[trip][e], prenorm[trip][e], fragment_sum)
            thread_sum = ptx.add_rn_f32(thread_sum, fragment_sum)
        warp_sum = self.butterfly_sum(thread_sum, (1, 2, 4, 8, 16))

        smem = cutlass.memory.SmemAllocator()
        # warp sums, then two sets of cluster slots: a CTA may store the next
        # token's sum into a peer before that peer has read this token's.
        sums = smem.allocate_array(Uint32, self.warps + 2 * self.cluster)
        warp_slots = Int32((sums + 0).toint())
        cluster_slots = warp_slots + Int32(4 * self.warps) + parity * Int32(4 * self.cluster)
        if lane == 0:
            ptx.st_shared_b32(warp_slots + warp * 4, ptx.f32_bits(warp_sum))
        cute.arch.barrier()
        if warp == 0:
            partial = Float32(0.0)
            if lane < self.warps:
                partial = ptx.f32_from_bits(ptx.ld_shared_b32(warp_slots + lane * 4))
            cta_sum = self.butterfly_sum(partial, (16, 8, 4, 2, 1))
            if lane < self.cluster:
                ptx.st_shared_cluster_b32(cluster_slots + cta * 4, Int32(lane), ptx.f32_bits(cta_sum))
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()
        total = Float32(0.0)
        for peer in cutlass.range_constexpr(self.cluster):
            total = ptx.add_rn_f32(total, ptx.f32_from_bits(ptx.ld_shared_b32(cluster_slots + peer * 4)))
        mean = ptx.div_rn_f32(total, Float32(float(self.hidden)))
        inv_rms = ptx.rsqrt_sum_f64(mean, eps)

        for trip in cutlass.range_constexpr(self.trips):
            scaled = [
                ptx.mul_rn_f32(ptx.mul_rn_f32(prenorm[trip][e], inv_rms), weights[trip][e]) for e in range(VEC)
            ]
            normalized, normalized_words = device.round_to_bf16(scaled)
            element = Int64(token) * self.hidden + Int64(fragments[trip]) * VEC
            ptx.st_global(outputs.norm_out + element * 2, normalized_words, VEC_BYTES, Int32(valid[trip]))
            if cutlass.const_expr(self.output == "mxfp8"):
                self.quantize(normalized, normalized_words, fragments[trip], valid[trip], token, outputs.mx_values,
                              outputs.mx_scales)


    @cute.jit
    def quantize(self, values, words, fragment, valid, token, mx_values: Int64, mx_scales: Int64):
        """Step 7 for one fragment: the quad's scale byte, eight E4M3 values, the tile word of scales."""
        magnitude = Uint32(0)
        for word in cutlass.range_constexpr(4):
            magnitude = cutlass.max(magnitude, words[word] & Uint32(device.ABS_MASK_BF16))
            magnitude = cutlass.max(magnitude, (words[word] >> Uint32(16)) & Uint32(device.ABS_MASK_BF16))
        for offset in cutlass.range_constexpr(1, 3):
            magnitude = cutlass.max(magnitude, ptx.shfl_bfly_b32(magnitude, offset))
        block_max = ptx.f32_from_bits(magnitude << Uint32(16))
        ratio = ptx.mul_rn_f32(block_max, ptx.f32_from_bits(Uint32(device.INV_E4M3_MAX_BITS)))
        if cutlass.const_expr(self.arch == "sm_100a"):
            exponent = device.ue8m0_round_up_instruction(ratio)
        else:
            exponent = device.ue8m0_round_up_bits(ratio)
        inverse_scale = ptx.f32_from_bits((Uint32(device.UE8M0_MAX) - exponent) << Uint32(23))
        pairs = [
            ptx.cvt_rn_satfinite_e4m3x2_f32(
                ptx.mul_rn_f32(values[2 * i + 1], inverse_scale), ptx.mul_rn_f32(values[2 * i], inverse_scale)
            )
            for i in range(VEC // 2)
        ]
        packed = [pairs[0] | (pairs[1] << Uint32(16)), pairs[2] | (pairs[3] << Uint32(16))]
        ptx.st_global(mx_values + Int64(token) * self.hidden + Int64(fragment) * VEC, packed, 8, Int32(valid))

        column = fragment // (MXFP8_BLOCK // VEC)
        tile_word = exponent << Uint32((column % SCALE_TILE_COLS) * 8)
        for offset in cutlass.range_constexpr(2, 4):
            tile_word = tile_word | ptx.shfl_bfly_b32(tile_word, 1 << offset)
        leader = valid & (fragment % FRAGMENTS_PER_SCALE_WORD == 0)
        ptx.st_global(mx_scales + self.scale_index(token, column), [tile_word], 4, Int32(leader))

    @cute.jit
    def zero_padding_scales(self, rows: Int32, first_token, cta, tidx, mx_scales: Int64):
        """Zero the scale words of rows M .. round_up(M, 128), spread over the whole grid."""
        clusters, _, _ = cute.arch.grid_dim()
        words_per_row = self.scale_cols // SCALE_TILE_COLS
        padded_rows = (rows + SCALE_TILE_ROWS - 1) // SCALE_TILE_ROWS * SCALE_TILE_ROWS
        pad_words = (padded_rows - rows) * words_per_row
        stride = clusters * self.cluster * self.threads
        word = (first_token * self.cluster + cta) * self.threads + tidx
        while word < pad_words:
            row = rows + word // words_per_row
            column = (word % words_per_row) * SCALE_TILE_COLS
            ptx.st_global(mx_scales + self.scale_index(row, column), [Uint32(0)], 4, Int32(1))
            word = word + stride
