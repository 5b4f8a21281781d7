"""The kernel-side timeout contract: a diagnostic record that survives a trap.

A kernel that waits on another rank (a mailbox tag, a grid barrier, a Lamport
slot, a generation flag) and exceeds its deadline must not hang and must not
die silently: it writes what it was waiting for into host memory, prints it,
and executes ``trap``. The trap kills the CUDA context, but the record lives
in pinned host memory (``cudaHostAlloc``), whose address the device uses
directly, so the host process reads it afterwards without touching CUDA, and
the worker dumps it as JSON into the run directory for the watchdog's report.

Layout: 16 little-endian 32-bit words, 64 bytes, at the pinned tensor's base.

======  ====  =================  ==============================================
offset  word  field              meaning
======  ====  =================  ==============================================
0       0     magic              0x444B4352 (bytes "RCKD"); written last
4       1     version            1
8       2     rank               the rank whose kernel timed out
12      3     launch             its launch counter (uint32)
16      4     step               the step or phase it was in (int32, -1: none)
20      5     awaited_rank       the rank it waited for (int32, -1: any/unknown)
24      6     expected_tag       the tag/generation/count it waited to see
28      7     seen_tag           what it last read instead
32      8     kind               which wait (``WaitKind``)
36      9     elapsed_ns_lo      nanoseconds waited (``%globaltimer``), low word
40      10    elapsed_ns_hi      high word
44      11    timeout_ns_lo      the deadline it was given, low word
48      12    timeout_ns_hi      high word
52      13    block              linear CTA index of the writer
56      14    thread             linear thread index within the CTA
60      15    checksum           ``checksum(words[1:15])`` (below)
======  ====  =================  ==============================================

Memory ordering (device writer, ``write_diag_and_trap``): the writer first
reads the magic word (``ld.relaxed.sys``); if another thread already committed
a record it only prints and traps, so the first complete record is kept.
Otherwise it stores words 1-15 with ``st.relaxed.sys.global.b32``, executes
``membar.sys`` (the payload is visible system-wide before the magic), stores
the magic, ``membar.sys`` again (the magic reaches host memory before the
trap tears the context down), prints one line with ``printf`` and traps. Two
threads that time out at the same instant can both pass the magic check and
interleave their payloads; the checksum exposes that (``DiagReport.torn``)
rather than presenting a mixture as one record. No atomic is used on host
memory, whose atomicity over PCIe is not guaranteed.

Checksum: ``(0xA5A5A5A5 + sum(words[i] * (2 i + 1) for i in 1..14)) mod 2^32``,
computed identically by ``checksum`` (host) and the device writer.

Host side: ``DiagRecord`` owns the pinned tensor (``address`` goes to the
kernel), ``read()`` decodes it (None while nothing was written), ``dump(path)``
writes the JSON the watchdog reads (``load_dump`` reads it back).

Deadline policy. A deadline of 0 means none: the wait spins until the
peer arrives, never commits a record and never traps, so a committed
record's ``timeout_ns`` is always positive (``describe`` never reads "0
ms"). The public constructors (``AllReduceMHC(timeout_ms=)``,
``ShardedMarkovSampler(timeout_ns=)``) default to ``SERVING_DEADLINE_NS``
(10 minutes): a serving engine's peer may stall for seconds (a long host
step, a preemption) and must not lose its CUDA context to a trap for that,
while a peer that is gone for good still ends in a record naming it rather
than in a silent hang. Ten minutes is ``torch.distributed``'s default NCCL
collective timeout, so an engine whose peer stalls that long has its own
collectives time out as well. The harness passes its own short deadlines
(``harness/families/*/kernel.py``) so its hang and timeout scenarios end in
seconds. Every one of these defaults is written once, in
``contracts.deadlines``, which this module, the golden stand-ins and the
harness import.

The device writer needs CuTe DSL; the host side needs only torch, so the
worker and the watchdog import this module on machines without the DSL.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from contracts.deadlines import SERVING_DEADLINE_NS

MAGIC = 0x444B4352
VERSION = 1
WORDS = 16
RECORD_BYTES = WORDS * 4
CHECKSUM_SEED = 0xA5A5A5A5
DUMP_FORMAT = "rankcheck-diag"

# Word indices (byte offset = 4 * index).
W_MAGIC, W_VERSION, W_RANK, W_LAUNCH, W_STEP, W_AWAITED, W_EXPECTED, W_SEEN = range(8)
W_KIND, W_ELAPSED_LO, W_ELAPSED_HI, W_TIMEOUT_LO, W_TIMEOUT_HI, W_BLOCK, W_THREAD, W_CHECKSUM = range(8, 16)

_U32 = 0xFFFFFFFF


class WaitKind(enum.IntEnum):
    """Which wait timed out (word ``kind``)."""

    UNSPECIFIED = 0
    MAILBOX_TAG = 1  # a peer's mailbox record did not carry the expected tag (seed 000)
    GRID_BARRIER = 2  # the CTAs of this grid did not all arrive (cooperative barrier)
    LAMPORT_SLOT = 3  # a mailbox slot still held the -0.0 sentinel (seed 004)
    PEER_FLAG = 4  # a flag or counter in a peer's buffer did not reach its value
    GENERATION = 5  # a generation word did not advance (seed 004)
    CALL_MISMATCH = 6  # a peer's launch carried another call size: expected = this rank's bytes, seen = the peer's


class DiagFormatError(ValueError):
    """The words are not a diagnostic record of a known version."""


def checksum(payload: Sequence[int]) -> int:
    """The checksum of words 1..14 (``payload``, 14 values), as the device computes it."""
    if len(payload) != W_CHECKSUM - 1:
        raise ValueError(f"checksum: payload must be {W_CHECKSUM - 1} words, got {len(payload)}")
    total = CHECKSUM_SEED
    for offset, word in enumerate(payload):
        total = (total + (int(word) & _U32) * (2 * (offset + 1) + 1)) & _U32
    return total


def _signed(word: int) -> int:
    """A 32-bit word read as two's-complement int32."""
    word &= _U32
    return word - (1 << 32) if word & 0x80000000 else word


@dataclass(frozen=True)
class DiagReport:
    """A decoded diagnostic record."""

    rank: int
    launch: int
    step: int
    awaited_rank: int
    expected_tag: int
    seen_tag: int
    kind: int
    elapsed_ns: int
    timeout_ns: int
    block: int
    thread: int
    torn: bool = False

    @property
    def kind_name(self) -> str:
        """The ``WaitKind`` name, or ``kind <n>`` for a value this version does not know."""
        try:
            return WaitKind(self.kind).name
        except ValueError:
            return f"kind {self.kind}"

    def describe(self) -> str:
        """One sentence for a report: who waited for whom, where, and how long."""
        awaited = "any rank" if self.awaited_rank < 0 else f"rank {self.awaited_rank}"
        step = "" if self.step < 0 else f" step {self.step}"
        torn = " (record torn: several threads timed out at once)" if self.torn else ""
        if self.kind == WaitKind.CALL_MISMATCH:
            return (
                f"rank {self.rank} launch {self.launch}{step}: CALL_MISMATCH: {awaited} called with "
                f"{self.seen_tag} bytes where rank {self.rank} called with {self.expected_tag} "
                f"[block {self.block}, thread {self.thread}]{torn}"
            )
        return (
            f"rank {self.rank} launch {self.launch}{step}: {self.kind_name} wait for {awaited} timed out "
            f"after {self.elapsed_ns / 1e6:.3f} ms (deadline {self.timeout_ns / 1e6:.3f} ms): expected tag "
            f"{self.expected_tag}, saw {self.seen_tag} [block {self.block}, thread {self.thread}]{torn}"
        )

    def to_json(self) -> dict:
        """The fields as a JSON-able dict (with ``kind_name``)."""
        return {**asdict(self), "kind_name": self.kind_name}


def encode(report: DiagReport) -> list[int]:
    """The 16 unsigned words a device writer stores for ``report`` (magic and checksum included)."""
    words = [0] * WORDS
    words[W_MAGIC] = MAGIC
    words[W_VERSION] = VERSION
    words[W_RANK] = report.rank & _U32
    words[W_LAUNCH] = report.launch & _U32
    words[W_STEP] = report.step & _U32
    words[W_AWAITED] = report.awaited_rank & _U32
    words[W_EXPECTED] = report.expected_tag & _U32
    words[W_SEEN] = report.seen_tag & _U32
    words[W_KIND] = report.kind & _U32
    words[W_ELAPSED_LO] = report.elapsed_ns & _U32
    words[W_ELAPSED_HI] = (report.elapsed_ns >> 32) & _U32
    words[W_TIMEOUT_LO] = report.timeout_ns & _U32
    words[W_TIMEOUT_HI] = (report.timeout_ns >> 32) & _U32
    words[W_BLOCK] = report.block & _U32
    words[W_THREAD] = report.thread & _U32
    words[W_CHECKSUM] = checksum(words[W_VERSION:W_CHECKSUM])
    return words


def decode(words: Sequence[int]) -> DiagReport | None:
    """The report in ``words`` (signed or unsigned 32-bit), or None when no record was committed."""
    if len(words) != WORDS:
        raise DiagFormatError(f"a diagnostic record has {WORDS} words, got {len(words)}")
    w = [int(x) & _U32 for x in words]
    if w[W_MAGIC] == 0:
        return None
    if w[W_MAGIC] != MAGIC:
        raise DiagFormatError(f"bad magic 0x{w[W_MAGIC]:08X} (expected 0x{MAGIC:08X}): not a diagnostic record")
    if w[W_VERSION] != VERSION:
        raise DiagFormatError(f"diagnostic record version {w[W_VERSION]}, this reader knows {VERSION}")
    return DiagReport(
        rank=w[W_RANK],
        launch=w[W_LAUNCH],
        step=_signed(w[W_STEP]),
        awaited_rank=_signed(w[W_AWAITED]),
        expected_tag=w[W_EXPECTED],
        seen_tag=w[W_SEEN],
        kind=w[W_KIND],
        elapsed_ns=w[W_ELAPSED_LO] | (w[W_ELAPSED_HI] << 32),
        timeout_ns=w[W_TIMEOUT_LO] | (w[W_TIMEOUT_HI] << 32),
        block=w[W_BLOCK],
        thread=w[W_THREAD],
        torn=checksum(w[W_VERSION:W_CHECKSUM]) != w[W_CHECKSUM],
    )


class DiagRecord:
    """One rank's diagnostic record: a pinned host int32 tensor a kernel writes before it traps."""

    def __init__(self, *, pin: bool | None = None) -> None:
        pin = torch.cuda.is_available() if pin is None else pin
        self.tensor = torch.zeros(WORDS, dtype=torch.int32, pin_memory=pin)
        self.pinned = bool(pin)

    @property
    def address(self) -> int:
        """The base address a kernel stores to (valid on the device only when pinned)."""
        if not self.pinned:
            raise RuntimeError("DiagRecord.address: the record is not in pinned memory (no CUDA); kernels cannot write it")
        return self.tensor.data_ptr()

    def reset(self) -> None:
        """Clear the record (before a launch that may write it)."""
        self.tensor.zero_()

    def words(self) -> list[int]:
        """The 16 words as unsigned ints, read from host memory (no CUDA call)."""
        return [int(x) & _U32 for x in self.tensor.tolist()]

    def read(self) -> DiagReport | None:
        """The committed record, or None while no kernel wrote one."""
        return decode(self.words())

    def dump(self, path: str | os.PathLike, **context) -> DiagReport | None:
        """Write the record (raw words, decoded fields, ``context``) as JSON to ``path``; return the report."""
        words = self.words()
        document: dict = {"format": DUMP_FORMAT, "version": VERSION, "words": words, "context": context}
        try:
            report = decode(words)
            document["record"] = None if report is None else report.to_json()
            document["problem"] = None
        except DiagFormatError as exc:
            report = None
            document["record"] = None
            document["problem"] = str(exc)
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "w") as fh:
            json.dump(document, fh, indent=1)
        os.replace(tmp, path)
        return report


def record_of(system: object) -> "DiagRecord | None":
    """The kernel diagnostic record a system keeps (its ``diag_record`` or ``diag`` attribute), or None."""
    for name in ("diag_record", "diag"):
        record = getattr(system, name, None)
        if record is not None and callable(getattr(record, "read", None)):
            return record
    return None


def load_dump(path: str | os.PathLike) -> DiagReport | None:
    """The report of a JSON file written by ``DiagRecord.dump`` (None when nothing was committed)."""
    with open(path) as fh:
        document = json.load(fh)
    if document.get("format") != DUMP_FORMAT:
        raise DiagFormatError(f"{path}: format is {document.get('format')!r}, expected {DUMP_FORMAT!r}")
    return decode(document["words"])


# --------------------------------------------------------------------------- device writer

try:
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64, Uint32

    from kernels import ptx

    _HAVE_DSL = True
except ImportError:  # the host side works without the DSL
    _HAVE_DSL = False


if _HAVE_DSL:

    @cute.jit
    def write_diag_and_trap(
        record: Int64,
        rank: Int32,
        launch: Int32,
        step: Int32,
        awaited_rank: Int32,
        expected_tag: Uint32,
        seen_tag: Uint32,
        kind: Int32,
        elapsed_ns: Int64,
        timeout_ns: Int64,
    ):
        """Commit a diagnostic record at ``record`` (unless one is there), print it, and trap."""
        if ptx.ld_ordered_b32(record, "relaxed", "sys") != Uint32(MAGIC):
            tid_x, tid_y, tid_z = cute.arch.thread_idx()
            bid_x, bid_y, bid_z = cute.arch.block_idx()
            bdim_x, bdim_y, _ = cute.arch.block_dim()
            gdim_x, gdim_y, _ = cute.arch.grid_dim()
            payload = [
                Uint32(VERSION),
                Uint32(rank),
                Uint32(launch),
                Uint32(step),
                Uint32(awaited_rank),
                Uint32(expected_tag),
                Uint32(seen_tag),
                Uint32(kind),
                Uint32(elapsed_ns),
                Uint32(elapsed_ns >> 32),
                Uint32(timeout_ns),
                Uint32(timeout_ns >> 32),
                Uint32(bid_x + bid_y * gdim_x + bid_z * gdim_x * gdim_y),
                Uint32(tid_x + tid_y * bdim_x + tid_z * bdim_x * bdim_y),
            ]
            total = Uint32(CHECKSUM_SEED)
            for i in cutlass.range_constexpr(W_CHECKSUM - 1):
                ptx.st_ordered_b32(record + 4 * (i + 1), payload[i], "relaxed", "sys")
                total = total + payload[i] * Uint32(2 * (i + 1) + 1)
            ptx.st_ordered_b32(record + 4 * W_CHECKSUM, total, "relaxed", "sys")
            # The payload must be visible before the magic that commits it.
            ptx.fence("membar.sys")
            ptx.st_ordered_b32(record, Uint32(MAGIC), "relaxed", "sys")
        # The magic must reach host memory before the trap ends the context.
        ptx.fence("membar.sys")
        cute.printf(
            "rankcheck diag: rank {} launch {} step {} kind {}: waited {} ns (deadline {}) for rank {}, "
            "expected tag {}, saw {}",
            rank,
            launch,
            step,
            kind,
            elapsed_ns,
            timeout_ns,
            awaited_rank,
            expected_tag,
            seen_tag,
        )
        ptx.trap()

else:

    def write_diag_and_trap(*args, **kwargs):
        """Unavailable: the device writer needs CuTe DSL (nvidia-cutlass-dsl)."""
        raise ImportError("kernels.diag.write_diag_and_trap needs CuTe DSL (nvidia-cutlass-dsl)")


__all__: Sequence[str] = (
    "DiagFormatError",
    "DiagRecord",
    "DiagReport",
    "MAGIC",
    "RECORD_BYTES",
    "VERSION",
    "WaitKind",
    "WORDS",
    "checksum",
    "decode",
    "encode",
    "load_dump",
    "write_diag_and_trap",
)
