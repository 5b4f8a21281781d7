"""BT owner reduce: each rank sums the tokens it owns and fans the BF16 sums out.

Token ``t`` belongs to rank ``t % tp`` and sits at local row ``t // tp`` of
the owner's BT mailbox ``[GENERATIONS, tp, owner_capacity, H]``. Grid
``ceil(M / tp) * ctas_per_token`` CTAs (or fewer, below) of ``threads`` threads, one 16-byte
fragment per thread; a thread whose token ``local*tp + rank`` is ``>= M``
(the last round of a call that ``tp`` does not divide) does nothing but join
the barrier.

With ``g = state[ACTIVE]`` (set by the BT publish): poll (``ld.volatile``)
the ``tp`` slots ``mailbox[g][source][local]`` until no half is the
sentinel, sum them as the LL consumer does (``s = +0.0; s = s + f32(slot_r)``
for ``r = 0 .. tp-1``, ``add.rn.f32``, one BF16 rounding), scrub a 0x8000
half to 0x0000, and store the fragment at ``reduced[g][t]`` of every rank
(one ``multimem.st``, or one store per peer through the table), and write
the sentinel back over the slots it read. A grid of fewer CTAs than
``ceil(M/tp) * ctas_per_token`` (``ctas``, chosen by the host so that virtual
ranks sharing one GPU stay resident together) walks the work. Then CTA 0
thread 0 sets ``state[NEXT] = (g + 1) % 3`` and the grid releases its
dependents (the next kernel still waits for the whole grid).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32

from kernels import ptx
from kernels.flight import ident as flight_ident
from kernels.flight_device import FlightRing, begin, digest, end, key_part, take
from kernels.allreduce_mhc import device
from kernels.allreduce_mhc.arguments import WaitDeadline
from kernels.allreduce_mhc.kernel_shape import FANOUTS, AllReduceKernel, check_choice
from kernels.allreduce_mhc.layout import (
    ACTIVE,
    GENERATIONS,
    NEXT,
    PUBLISH_THREADS,
    VEC,
    VEC_BYTES,
)


class OwnerReduceKernel(AllReduceKernel):
    """Reduces the tokens a rank owns (BT) and fans the sums out to every rank."""

    def __init__(self, *, hidden: int, tp: int, capacity: int, fanout: str, threads: int = PUBLISH_THREADS,
                 flight: bool = True) -> None:
        check_choice("fanout", fanout, FANOUTS)
        self.keep_fragment_grid(hidden, tp, capacity, threads, flight)
        self.fanout = fanout

    def key(self) -> tuple:
        """The configuration that identifies a compiled variant."""
        return ("owner_reduce", self.hidden, self.tp, self.capacity, self.fanout, self.threads) + key_part(self.flight)

    @cute.jit
    def __call__(
        self,
        mailbox: Int64,
        state: Int64,
        target: Int64,
        timeout_ns: Int64,
        diag: Int64,
        rank: Int32,
        launch: Int32,
        m: Int32,
        ctas: Int32,
        flight_records: Int64, flight_words: Int64, flight_mask: Int32,  # kernels.flight.FlightRecorder.args()
        stream: cuda.CUstream,
    ) -> None:
        """Launch the owner reduce on ``ctas`` CTAs, programmatic dependent launch."""
        self.launch_pdl((mailbox, state, target, WaitDeadline(timeout_ns, diag, rank, launch), m),
                        (flight_records, flight_words, flight_mask), (ctas, 1, 1), stream)

    def work_items(self, m: int) -> int:
        """CTA-sized pieces of a call of ``m`` rows on one owner: its tokens times ``ctas_per_token``."""
        return -(-m // self.tp) * self.ctas_per_token

    def slot_byte_offset(self, generation: Int64, source: int, local, fragment) -> Int64:
        """Byte offset of source ``source``'s fragment of local row ``local`` in the BT mailbox."""
        slot = (generation * self.tp + source) * self.owner_capacity + Int64(local)
        return (slot * self.hidden + Int64(fragment) * VEC) * 2

    @cute.kernel
    def kernel(self, mailbox: Int64, state: Int64, target: Int64, deadline: WaitDeadline, m: Int32, ring: FlightRing):
        """Walk this owner's fragments, then advance NEXT and release the dependents."""
        block, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        tidx, _, _ = cute.arch.thread_idx()
        work_items = (m + (self.tp - 1)) // self.tp * self.ctas_per_token

        flight_launch = take(self.flight, ring, 1)
        cute.arch.griddepcontrol_wait()
        generation = ptx.ld_volatile_b32_or(state + ACTIVE * 4, Int32(1), Uint32(0))
        begin(self.flight, ring, flight_ident("allreduce_mhc", "owner_reduce", "bt"), 1,
              (generation, Uint32(0), m, Uint32(0), digest([m]), Uint32(0)), launch=flight_launch)
        peers = None
        if cutlass.const_expr(self.fanout == "unicast"):
            peers = device.load_peer_table(target, self.tp)
        # A grid smaller than the work (virtual ranks sharing one GPU must all
        # stay resident) walks it.
        work = block
        while work < work_items:
            self.reduce_fragment(work, tidx, generation, mailbox, target, peers, deadline, m)
            work = work + ctas

        next_generation = (generation + Uint32(1)) % Uint32(GENERATIONS)
        ptx.st_global(state + NEXT * 4, [next_generation], 4, Int32((block == 0) & (tidx == 0)))
        cute.arch.barrier()
        cute.arch.griddepcontrol_launch_dependents()
        end(self.flight, ring, 1, launch=flight_launch)

    @cute.jit
    def reduce_fragment(self, work, tidx, generation, mailbox: Int64, target: Int64, peers, deadline: WaitDeadline,
                        m: Int32):
        """One fragment of one owned token: poll every source, sum in rank order, fan out, scrub the slots."""
        local = work // self.ctas_per_token
        fragment = (work % self.ctas_per_token) * self.threads + tidx
        token = local * self.tp + deadline.rank
        active = (token < m) & (fragment < self.fragments)
        generation64 = Int64(generation)
        addresses = [
            mailbox + self.slot_byte_offset(generation64, source, local, fragment) for source in range(self.tp)
        ]
        words = device.poll_fragments(addresses, list(range(self.tp)), active, deadline, Int32(token), generation)
        total = [Float32(0.0)] * VEC
        for source in cutlass.range_constexpr(self.tp):
            values = device.bf16_words_to_f32(words[4 * source : 4 * source + 4])
            for e in cutlass.range_constexpr(VEC):
                total[e] = ptx.add_rn_f32(total[e], values[e])
        summed = device.scrub_sentinel(device.f32_to_bf16_words(total))
        byte_offset = ((generation64 * self.capacity + Int64(token)) * self.hidden + Int64(fragment) * VEC) * 2
        device.fan_out(summed, byte_offset, target, peers, Int32(active))
        for source in cutlass.range_constexpr(self.tp):
            ptx.st_global(addresses[source], device.sentinel_fragment(), VEC_BYTES, Int32(active))
