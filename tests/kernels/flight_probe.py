"""A minimal kernel that records one launch in a flight ring: the device writers compiled (CPU) and run (GPU) alone.

Grid (ctas,), 64 threads: every thread stores its index into ``out[block *
64 + thread]``; thread 0 of CTA 0 begins the record (tag, parity, rows,
steps and aux as given, the digest of ``rows`` and ``steps``) and, with
``end``, ends it after the stores (``keep``: with the launch number it kept
from the begin, else read back from the counter words). ``end=False`` leaves
a record begun and never ended, as a kernel that hangs would.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32, const_expr

from kernels import ptx
from kernels.flight import ident
from kernels.flight_device import FlightRing, begin, checked_flag, digest, end, key_part
from kernels.variant import KernelVariant

THREADS = 64
PROBE_IDENT = ident("markov_fused", "anchor")


class FlightProbe(KernelVariant):
    """The probe kernel; ``flight`` compiles the recorder in, ``end`` its end."""

    def __init__(self, flight: bool = True, end: bool = True, keep: bool = False) -> None:
        self.flight = checked_flag(flight)
        self.end, self.keep = bool(end), bool(keep)

    def key(self) -> tuple:
        """The configuration that identifies this variant."""
        ending = ("end" if self.end else "noend", "keep" if self.keep else "reread")
        return ("FlightProbe", *ending) + key_part(self.flight)

    @cute.jit
    def __call__(self, out: Int64, tag: Int32, parity: Int32, rows: Int32, steps: Int32, aux: Int32, ctas: Int32,
                 flight_records: Int64, flight_words: Int64, flight_mask: Int32, stream: cuda.CUstream):
        """Launch ``ctas`` CTAs of 64 threads."""
        self.kernel(out, tag, parity, rows, steps, aux, FlightRing(flight_records, flight_words, flight_mask)).launch(
            grid=(ctas, 1, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, out: Int64, tag: Int32, parity: Int32, rows: Int32, steps: Int32, aux: Int32, ring: FlightRing):
        """Begin, store the thread indices, end."""
        launch = begin(self.flight, ring, PROBE_IDENT, 0,
              (Uint32(tag), Uint32(parity), Uint32(rows), Uint32(steps), digest([rows, steps]), Uint32(aux)))
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        index = block * THREADS + tidx
        ptx.st_global(out + Int64(index) * 4, [Uint32(index)], 4, Int32(1))
        if const_expr(self.end):
            end(self.flight, ring, 0, launch=launch if const_expr(self.keep) else None)
