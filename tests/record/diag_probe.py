"""A tiny kernel that waits on a flag nobody sets and reports through the diagnostic record.

``DiagTrapProbe`` launches 2 CTAs of 64 threads; thread ``writer_thread`` of
CTA ``writer_block`` polls an int32 flag (``ld.relaxed.sys``) until it equals
``expected`` or ``timeout_ns`` of ``%globaltimer`` pass, then calls
``write_diag_and_trap`` with what it saw; every other thread returns at once.
Used by the diag tests: compiled on the CPU (PTX checked), run on a GPU in a
child process (the trap kills the context).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32

from kernels import ptx
from kernels.diag import WaitKind, write_diag_and_trap


class DiagTrapProbe:
    """Configuration: which thread waits (block, thread); everything else is a runtime argument."""

    def __init__(self, writer_block: int = 1, writer_thread: int = 33) -> None:
        self.writer_block = writer_block
        self.writer_thread = writer_thread

    @cute.jit
    def __call__(self, record: Int64, flag: Int64, rank: Int32, launch: Int32, step: Int32, awaited_rank: Int32,
                 expected: Uint32, timeout_ns: Int64, stream: cuda.CUstream):
        self.kernel(record, flag, rank, launch, step, awaited_rank, expected, timeout_ns).launch(
            grid=(2, 1, 1), block=(64, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(self, record: Int64, flag: Int64, rank: Int32, launch: Int32, step: Int32, awaited_rank: Int32,
               expected: Uint32, timeout_ns: Int64):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        if tid == self.writer_thread and bid == self.writer_block:
            start = ptx.globaltimer()
            seen = ptx.ld_ordered_b32(flag, "relaxed", "sys")
            waited = Int64(0)
            while seen != expected:
                seen = ptx.ld_ordered_b32(flag, "relaxed", "sys")
                waited = ptx.globaltimer() - start
                if waited > timeout_ns:
                    write_diag_and_trap(
                        record, rank, launch, step, awaited_rank, expected, seen, Int32(int(WaitKind.PEER_FLAG)),
                        waited, timeout_ns,
                    )


def compile_probe(probe: DiagTrapProbe, *, keep_ptx: bool = False):
    """Compile ``probe`` with placeholder arguments (no GPU needed with CUTE_DSL_ARCH set)."""
    return cute.compile(probe, Int64(0), Int64(0), Int32(0), Int32(0), Int32(0), Int32(0), Uint32(0), Int64(0),
                        cute.runtime.make_fake_stream(), options="--keep-ptx" if keep_ptx else None)
