"""``PeerGatherKernel``: the device all-gather of the fused loop's packets and draft logits.

Grid ``(ctas,)``, 128 threads, one launch per gather (the protocol, the
layout in bytes and why a slot is never overwritten while read are in
``kernels/markov_fused/exchange.py``'s docstring; sizes and offsets in
``exchange_layout.py``). Compile-time configuration: ``unit``, the bytes
per piece (16 or 2). Every instruction is a ``kernels.ptx`` helper.

A CTA: reads the launch counter (tag, parity); stores its share of the
source, piece by piece, into its rank's slot of every rank's buffer (weak
stores through the peer table; no multicast); ``bar.sync``; thread 0 does
``fence.sc.sys`` and posts the tag into every rank's flag ``(parity, rank,
cta)``, together with the call's payload bytes in one 64-bit
``st.release.sys``; threads ``k < world`` poll this rank's flag ``(parity,
k, cta)`` with ``ld.acquire.sys`` until it carries the tag (past a positive
``timeout_ns``: the ``kernels.diag`` record, kind MAILBOX_TAG, written by
the rank's first thread to claim ``CLAIM_WORD``, then ``trap``) and then
compare its size with their own (another size: the record, kind
CALL_MISMATCH, naming rank k and both sizes, then ``trap``: ranks that
called with different sizes are named at once, in eager calls and graph
replays alike); ``bar.sync``; the CTA copies its share of every rank's slot
(``ld.global.cg``: written by other agents) to the output; the last CTA to
finish (``atom.add.acq_rel.gpu`` on the end count) clears the count and
advances the counter, so a graph replay advances it as an eager launch does.

Flight recorder (``flight=True``, the default; ``kernels.flight``): the
gather records into its loop's ring (``MarkovKernels``' recorder, kernel
``gather``). Thread 0 of CTA 0 begins the launch's record where it reads
the launch counter (tag, parity, pieces as rows, the draft ``step`` as aux,
a digest of pieces, world, step and the slot size), and the last CTA ends
it where it advances the counter.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32
from cutlass.memory import SmemAllocator

from kernels.diag import WaitKind, write_diag_and_trap
from kernels.flight import ident as flight_ident, kernel_index
from kernels import flight_device, ptx  # flight_device.begin/end by module: the kernel's `begin`/`end` are its share
from kernels.flight_device import FlightRing, checked_flag, digest, key_part
from kernels.markov_fused.exchange_layout import (
    CLAIM_WORD,
    END_WORD,
    FLAG_BYTES,
    FLAGS_BYTES,
    LAUNCH_WORD,
    MAX_CTAS,
    MAX_RANKS,
    TAG_PERIOD,
    THREADS,
    UNITS,
)
from kernels.variant import KernelVariant

# The gather's number among the fused loop's kernels (``kernels.flight.KERNELS``): its flight device word.
GATHER_KERNEL = kernel_index("markov_fused", "gather")


@cute.jit
def _await_flag(address: Int64, tag: Uint32, nbytes: Uint32, timeout_ns: Int64, diag: Int64, claim: Int64,
                rank: Int32, launch: Uint32, step: Int32, awaited: Int32):
    """Poll the flag at ``address`` (``ld.acquire.sys``, 64 bits) until its low word carries ``tag``, then
    compare its high word with this call's ``nbytes``; past a positive ``timeout_ns`` (MAILBOX_TAG), or on
    another size (CALL_MISMATCH), the first thread of the rank to claim the word at ``claim`` commits the
    diagnostic record at ``diag`` (if any) naming ``awaited``; every such thread traps."""
    word = ptx.ld_ordered_b64(address, "acquire", "sys")
    seen = Uint32(word & 0xFFFFFFFF)
    if seen != tag:
        start = ptx.globaltimer()
        while seen != tag:
            word = ptx.ld_ordered_b64(address, "acquire", "sys")
            seen = Uint32(word & 0xFFFFFFFF)
            if timeout_ns > 0:
                elapsed = ptx.globaltimer() - start
                if elapsed > timeout_ns:
                    _claim_record_and_trap(diag, claim, rank, launch, step, awaited, tag, seen,
                                           Int32(int(WaitKind.MAILBOX_TAG)), elapsed, timeout_ns)
    peer_bytes = Uint32((word >> 32) & 0xFFFFFFFF)
    if peer_bytes != nbytes:
        # Gathering on would mix two calls' data (or wait for CTAs the peer never launched): name it now.
        _claim_record_and_trap(diag, claim, rank, launch, step, awaited, nbytes, peer_bytes,
                               Int32(int(WaitKind.CALL_MISMATCH)), Int64(0), timeout_ns)


@cute.jit
def _claim_record_and_trap(diag: Int64, claim: Int64, rank: Int32, launch: Uint32, step: Int32, awaited: Int32,
                           expected: Uint32, seen: Uint32, kind: Int32, elapsed: Int64, timeout_ns: Int64):
    """The first thread of the rank to claim the word at ``claim`` commits the record at ``diag`` (if any);
    every caller traps."""
    # One writer per rank: several CTAs (and several awaited ranks) can fail together, and two writers could
    # interleave their words into one torn record.
    if diag != 0:
        claimed = ptx.atom_add_u32(claim, Uint32(1), "relaxed", "gpu")
        if claimed == Uint32(0):
            write_diag_and_trap(diag, rank, Int32(launch), step, awaited, expected, seen, kind, elapsed, timeout_ns)
    ptx.trap()


class PeerGatherKernel(KernelVariant):
    """Grid (ctas,), 128 threads: every rank's ``pieces * unit`` source bytes, gathered into ``out``
    ``[world][pieces * unit]`` through the peer buffers (module docstring)."""

    def __init__(self, *, unit: int, flight: bool = True) -> None:
        if unit not in UNITS:
            raise ValueError(f"unit: expected one of {UNITS}, got {unit!r}")
        self.unit = unit
        self.flight = checked_flag(flight)

    def key(self) -> tuple:
        """The configuration that identifies this variant (and its kernel symbol)."""
        return ("markov_peer_gather", self.unit) + key_part(self.flight)

    @cute.jit
    def __call__(
        self, src: Int64, out: Int64, peers: Int64, control: Int64, slot_bytes: Int64, diag: Int64,
        timeout_ns: Int64, pieces: Int32, rank: Int32, world: Int32, step: Int32, ctas: Int32,
        flight_records: Int64, flight_words: Int64, flight_mask: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(src, out, peers, control, slot_bytes, diag, timeout_ns, pieces, rank, world, step,
                    FlightRing(flight_records, flight_words, flight_mask)).launch(
            grid=(ctas, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(
        self, src: Int64, out: Int64, peers: Int64, control: Int64, slot_bytes: Int64, diag: Int64,
        timeout_ns: Int64, pieces: Int32, rank: Int32, world: Int32, step: Int32, ring: FlightRing,
    ) -> None:
        unit = self.unit
        tidx, _, _ = cute.arch.thread_idx()
        cta, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        smem = SmemAllocator()
        counter = smem.allocate(16, byte_alignment=16).toint()
        if tidx == 0:
            # The previous launch's last CTA advanced it (an earlier grid in this stream).
            launch_word = ptx.ld_volatile_global(control + LAUNCH_WORD * 4, 4, Int32(1))[0]
            ptx.st_shared_b32(counter, launch_word)
            flight_device.begin(self.flight, ring, flight_ident("markov_fused", "gather"), GATHER_KERNEL, (
                Uint32(1) + launch_word % Uint32(TAG_PERIOD), launch_word & Uint32(1), pieces, Uint32(0),
                digest([pieces, world, step, slot_bytes]), Uint32(step)))
        cute.arch.barrier()
        launch = ptx.ld_shared_b32(counter)
        tag = Uint32(1) + launch % Uint32(TAG_PERIOD)
        parity = Int64(launch & Uint32(1))
        share = (pieces + ctas - 1) // ctas
        begin = cutlass.min(cta * share, pieces)
        end = cutlass.min(begin + share, pieces)
        own_slot = Int64(FLAGS_BYTES) + (parity * Int64(world) + Int64(rank)) * slot_bytes

        # This CTA's share of the source into this rank's slot of every buffer
        # (a loop over peers: one peer address live at a time).
        for piece in cutlass.range(begin + tidx, end, THREADS, unroll=1):
            words = ptx.ld_global(src + Int64(piece) * unit, unit, Int32(1))
            for peer in cutlass.range(world, unroll=1):
                base = ptx.ld_global_nc_b64(peers + Int64(peer) * 8, Int32(1))
                ptx.st_global(base + own_slot + Int64(piece) * unit, words, unit, Int32(1))
        cute.arch.barrier()
        flag = Int64(((parity * MAX_RANKS + Int64(rank)) * MAX_CTAS + Int64(cta)) * FLAG_BYTES)
        if tidx == 0:
            # The CTA's stores (ordered before by bar.sync) reach every peer before its tags.
            ptx.fence("fence.sc.sys")
            posted = (Int64(Uint32(pieces * unit)) << 32) | (Int64(tag) & 0xFFFFFFFF)
            for peer in cutlass.range(world, unroll=1):
                base = ptx.ld_global_nc_b64(peers + Int64(peer) * 8, Int32(1))
                ptx.st_ordered_b64(base + flag, posted, "release", "sys")

        # Every rank's CTA `cta` posted this launch's share to this rank.
        own = ptx.ld_global_nc_b64(peers + Int64(rank) * 8, Int32(1))
        if tidx < world:
            awaited = Int64(((parity * MAX_RANKS + Int64(tidx)) * MAX_CTAS + Int64(cta)) * FLAG_BYTES)
            _await_flag(own + awaited, tag, Uint32(pieces * unit), timeout_ns, diag, control + CLAIM_WORD * 4,
                        rank, launch, step, Int32(tidx))
        cute.arch.barrier()
        span = end - begin
        for task in cutlass.range(tidx, span * world, THREADS, unroll=1):
            source = task // span
            piece = Int64(begin + task - source * span)
            slot = Int64(FLAGS_BYTES) + (parity * Int64(world) + Int64(source)) * slot_bytes
            words = ptx.ld_global_cg(own + slot + piece * unit, unit, Int32(1))
            ptx.st_global(out + (Int64(source) * Int64(pieces) + piece) * unit, words, unit, Int32(1))

        # The last CTA to finish advances the counter for the next launch.
        cute.arch.barrier()
        if tidx == 0:
            ptx.fence("membar.gl")
            previous = ptx.atom_add_u32(control + END_WORD * 4, Uint32(1), "acq_rel", "gpu")
            if previous == Uint32(ctas - 1):
                ptx.st_ordered_b32(control + END_WORD * 4, Uint32(0), "relaxed", "gpu")
                ptx.st_ordered_b32(control + LAUNCH_WORD * 4, launch + Uint32(1), "relaxed", "gpu")
                flight_device.end(self.flight, ring, GATHER_KERNEL, Int32(1))


__all__ = ["PeerGatherKernel"]
