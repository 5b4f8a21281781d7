"""Publish kernel: a rank's contribution into the Lamport mailboxes (LL or BT).

One thread owns one 16-byte fragment (8 BF16 values) of one token;
``ctas_per_token`` CTAs of ``threads`` threads cover a token, grid
``M * ctas_per_token``.

Contribution (``source``):
- ``"plain"``: the rank's BF16 partial ``x [M, H]``, bits unchanged.
- ``"finalize"``: the MoE finalize of seed 004: ``acc = +0.0``; for route
  ``k = 0 .. top_k-1`` in order, skipping ``idx[k] == -1`` (an expert this rank
  does not hold), ``acc = fma(f32(gemm2[idx[k]]), w[k], acc)`` (FP32 routing
  weights, one rounding each); then ``acc = acc + f32(shared)`` and one
  rounding to BF16.
A half equal to 0x8000 is stored as 0x0000 so it can never read as the
sentinel (adding +0.0 instead of -0.0 changes no sum).

Destination (``protocol``), all offsets in BF16 elements of the generation
``g = state[NEXT]`` read after ``griddepcontrol.wait``:
- ``"ll"``: ``((g*tp + rank)*capacity + token)*H + 8*fragment`` in every
  rank's LL mailbox: one ``multimem.st`` to the multicast address
  (``fanout="multicast"``), or one store per peer through the peer table
  (``fanout="unicast"``).
- ``"bt"``: ``((g*tp + rank)*owner_capacity + token // tp)*H + 8*fragment`` in
  the BT mailbox of the owner ``token % tp`` only (peer table).

Generation state: after its stores, CTA 0 thread 0 sets ``state[ACTIVE] = g``;
the consumer (LL) or owner reduce (BT) later advances ``NEXT``.

Launch order. Once every thread has read ``NEXT`` (a CTA barrier), each CTA
executes ``griddepcontrol.launch_dependents`` before its loads and stores,
so the next kernel in the stream launches while this grid works instead of
after it: the LL consumer polls the mailbox (the Lamport sentinel, not this
grid's completion, tells it a fragment is there) and the BT owner reduce
waits on ``griddepcontrol.wait``. Neither writes the state before that wait
has seen this grid complete, so ``NEXT`` is read here before it is advanced
and ``ACTIVE`` is set before ``NEXT`` moves on. The flight record's begin
(six stores to host-mapped memory by one thread) comes after that release,
so its writes across PCIe are not on the dependent's launch path; its launch
number is taken before the wait, where the atomic overlaps it.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32

from kernels import ptx
from kernels.flight import ident as flight_ident
from kernels.flight_device import FlightRing, begin, digest, end, key_part, take
from kernels.allreduce_mhc import device
from kernels.allreduce_mhc.kernel_shape import FANOUTS, AllReduceKernel, check_choice
from kernels.allreduce_mhc.layout import (
    ACTIVE,
    NEXT,
    PUBLISH_THREADS,
    TOP_K_MAX,
    VEC,
    VEC_BYTES,
)

PROTOCOLS = ("ll", "bt")
SOURCES = ("plain", "finalize")


class PublishKernel(AllReduceKernel):
    """Publishes one rank's contribution (plain or MoE finalize) for LL or BT."""

    def __init__(
        self,
        *,
        hidden: int,
        tp: int,
        capacity: int,
        protocol: str,
        source: str,
        fanout: str,
        top_k: int = 0,
        threads: int = PUBLISH_THREADS,
        flight: bool = True,
    ) -> None:
        check_choice("protocol", protocol, PROTOCOLS)
        check_choice("source", source, SOURCES)
        check_choice("fanout", fanout, FANOUTS)
        if source == "finalize" and not 1 <= top_k <= TOP_K_MAX:
            raise ValueError(f"top_k must be in [1, {TOP_K_MAX}] for finalize, got {top_k}")
        self.keep_fragment_grid(hidden, tp, capacity, threads, flight)
        self.protocol = protocol
        self.source = source
        self.fanout = fanout
        self.top_k = top_k

    def key(self) -> tuple:
        """The configuration that identifies a compiled variant."""
        return ("publish", self.hidden, self.tp, self.capacity, self.protocol, self.source, self.fanout,
                self.top_k, self.threads) + key_part(self.flight)

    @cute.jit
    def __call__(
        self,
        x: Int64,
        weights: Int64,
        indices: Int64,
        shared: Int64,
        state: Int64,
        target: Int64,
        rank: Int32,
        m: Int32,
        flight_records: Int64, flight_words: Int64, flight_mask: Int32,  # kernels.flight.FlightRecorder.args()
        stream: cuda.CUstream,
    ) -> None:
        """Launch the publish: ``M * ctas_per_token`` CTAs, programmatic dependent launch."""
        self.launch_pdl((x, weights, indices, shared, state, target, rank), (flight_records, flight_words, flight_mask),
                        (m * self.ctas_per_token, 1, 1), stream)

    @cute.jit
    def contribution(self, x: Int64, weights: Int64, indices: Int64, shared: Int64, token, fragment, active):
        """The fragment's four BF16 words before the sentinel scrub."""
        element = Int64(token) * self.hidden + Int64(fragment) * VEC
        if cutlass.const_expr(self.source == "plain"):
            words = ptx.ld_global(x + element * 2, VEC_BYTES, Int32(active))
        else:
            accumulator = [cutlass.Float32(0.0)] * VEC
            for route in cutlass.range_constexpr(self.top_k):
                slot = Int64(token) * self.top_k + route
                row = Int32(ptx.ld_global(indices + slot * 4, 4, Int32(1))[0])
                weight = ptx.f32_from_bits(ptx.ld_global(weights + slot * 4, 4, Int32(1))[0])
                routed = active & (row != Int32(-1))
                source_words = ptx.ld_global(
                    x + (Int64(row) * self.hidden + Int64(fragment) * VEC) * 2, VEC_BYTES, Int32(routed)
                )
                values = device.bf16_words_to_f32(source_words)
                if routed:
                    for e in cutlass.range_constexpr(VEC):
                        accumulator[e] = ptx.fma_rn_f32(values[e], weight, accumulator[e])
            shared_values = device.bf16_words_to_f32(ptx.ld_global(shared + element * 2, VEC_BYTES, Int32(active)))
            for e in cutlass.range_constexpr(VEC):
                accumulator[e] = ptx.add_rn_f32(accumulator[e], shared_values[e])
            words = device.f32_to_bf16_words(accumulator)
        return words

    @cute.kernel
    def kernel(self, x: Int64, weights: Int64, indices: Int64, shared: Int64, state: Int64, target: Int64, rank: Int32,
               ring: FlightRing):
        """One fragment of one token: load (or finalize) it, scrub the sentinel, store it where the protocol says."""
        block, _, _ = cute.arch.block_idx()
        tidx, _, _ = cute.arch.thread_idx()
        token = block // self.ctas_per_token
        fragment = (block % self.ctas_per_token) * self.threads + tidx
        active = fragment < self.fragments

        flight_launch = take(self.flight, ring, 0)
        # The previous kernel in the stream produced x and, for the call
        # before, consumed the mailbox generation this call may reuse.
        cute.arch.griddepcontrol_wait()
        generation = Int64(ptx.ld_volatile_b32_or(state + NEXT * 4, Int32(1), cutlass.Uint32(0)))
        blocks, _, _ = cute.arch.grid_dim()
        # Every thread has read NEXT: the dependent (LL consumer, BT owner
        # reduce) may launch now and overlap this grid (see the docstring).
        cute.arch.barrier()
        cute.arch.griddepcontrol_launch_dependents()
        begin(self.flight, ring, flight_ident("allreduce_mhc", "publish", self.protocol), 0, (
            generation, Uint32(0), blocks // self.ctas_per_token, Uint32(0), digest([blocks]),
            Uint32(self.source == "finalize")), launch=flight_launch)
        words = device.scrub_sentinel(self.contribution(x, weights, indices, shared, token, fragment, active))

        if cutlass.const_expr(self.protocol == "ll"):
            element = ((generation * self.tp + Int64(rank)) * self.capacity + Int64(token)) * self.hidden
            byte_offset = (element + Int64(fragment) * VEC) * 2
            if cutlass.const_expr(self.fanout == "multicast"):
                device.fan_out(words, byte_offset, target, None, Int32(active))
            else:
                device.fan_out(words, byte_offset, Int64(0), device.load_peer_table(target, self.tp), Int32(active))
        else:
            owner = token % self.tp
            slot = (generation * self.tp + Int64(rank)) * self.owner_capacity + Int64(token // self.tp)
            element = slot * self.hidden
            byte_offset = (element + Int64(fragment) * VEC) * 2
            owner_base = ptx.ld_global_nc_b64(target + Int64(owner) * 8, Int32(active))
            ptx.st_global(owner_base + byte_offset, words, VEC_BYTES, Int32(active))

        ptx.st_global(state + ACTIVE * 4, [cutlass.Uint32(generation)], 4, Int32((block == 0) & (tidx == 0)))
        end(self.flight, ring, 0, launch=flight_launch)
