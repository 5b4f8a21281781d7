"""The fused loop's capturable exchange: a tagged all-gather on the device through the fabric's peer buffers.

Seed 001's vocab-parallel loop gathers two things over the TP group: each
step's ``[rows, 4]`` int32 packets (before ``markov_pick``) and, after the
loop, the ``[rows, steps, width]`` BF16 draft logits (before
``cache_fill``). ``PeerGather`` does that with one kernel launch on the
current stream (``PeerGatherKernel``, ``exchange_kernel.py``) and no host
work, so a CUDA graph captures it with the rest of the loop. It works over
any ``kernels.fabric`` provider: ``VirtualFabric`` (ranks in one process on
one GPU, one stream each), ``SymmetricFabric`` with ranks sharing a GPU
(gloo) or a GPU per rank. Stores go through the peer table, one per rank;
NVLink multicast is never used.

Buffers (``exchange_layout.py`` has the byte layout): a peer buffer per
rank from ``fabric.alloc`` (flags ``[2][32][16]`` uint64: tag and call size, then payload
``[2 parity][world][slot_bytes]``), this rank's control words (launch
counter, end count) and a fixed output ``[world][slot_bytes]``; ``gather``
returns a view of the output, so the pointers a graph captured stay valid.
Who writes what: rank k writes only its slot ``(p, k)`` and its flags
``(p, k, c)`` of every rank's buffer; a rank reads only its own buffer.

Protocol of launch n (every rank launches its gathers in the same order;
the counter starts at 0 on every rank and advances once per launch, on the
device, so eager calls and graph replays count alike): tag ``t = 1 + n mod
2**31``, parity ``p = n & 1``. CTA c of rank k stores its share of the
payload into slot ``(p, k)`` of every buffer, then posts ``t`` with the
call's payload bytes into flag ``(p, k, c)`` of every buffer; it then waits
until flags ``(p, j, c)`` of its own buffer carry ``t`` for every rank j,
checks that each carries its own size, and copies share c of every slot
``(p, j)`` into the output.

The tag travels in a flag word per (rank, CTA) rather than inside the
payload, so one mechanism serves the packets and the draft logits (which
have no spare words); the packets keep the seed's layout, spare words 0.

Memory ordering. The payload stores are weak; ``bar.sync`` orders the
CTA's stores before thread 0's ``fence.sc.sys``, which orders them before
its ``st.release.sys`` of each flag (system scope: the reader may be another
process, and peer memory may sit on another GPU). The reader polls with
``ld.acquire.sys``; a ``bar.sync`` then orders the acquire before the CTA's
payload loads, which use ``ld.global.cg`` (L2; never a stale L1 line). The
output is read by the next kernel in the stream (the pick or the cache
fill), after this grid completes.

Why a stale value is never taken: the zero-filled flag matches no tag, and
slot ``(p, k)`` of a buffer is rewritten every second launch, so while rank
j waits in launch n the flag ``(p, k, c)`` holds the tag of launch n or of
n - 2 (rank k cannot be further behind: it finished n - 1, which needed
rank j's posts of n - 1, which rank j made after finishing n - 2); the two
tags differ. Why a slot is never overwritten while read (the double buffer
by parity): rank k writes slot ``(p, k)`` of rank j's buffer again in launch
n + 2, which it starts only after finishing launch n + 1; that needed rank
j's flags of n + 1, which rank j posts in its launch n + 1, which its stream
starts only after its launch n (the copy-out reading the slot) completed.
The output is rewritten by the next gather, which the stream starts after
the pick or fill that read it. ``exchange_layout.ExchangeModel`` replays
these orders on a CPU.

Deadline: a wait with ``timeout_ns > 0`` that exceeds it commits the
``kernels.diag`` record (kind MAILBOX_TAG: the awaited rank, the expected
tag, the one seen, the launch counter, the draft step) and traps. The
default is the public classes' serving deadline, ``kernels.diag.SERVING_DEADLINE_NS``
(10 minutes: ``docs/interfaces.md``, "Wait deadlines"); 0, the seed's
wait-forever, only when a caller passes it; the harness passes short deadlines.

Ranks must call every gather in lockstep, with the same sizes. Ranks that
disagree are named by the kernel itself, eagerly and in a replayed graph: a
peer whose flag carries this launch's tag with another size ends the launch
at once in the record (kind CALL_MISMATCH: the peer, its bytes and this
rank's) and a trap; a rank that skips a call, or never calls, leaves the
others waiting until their deadline, whose record (MAILBOX_TAG) names it and
the tag it last posted (a repeated call is the same disagreement seen from
the other side: the repeating rank waits for the others' next call). The
kernel compiles and loads into the context at construction (a first launch
would load it while a peer's grid spins); nothing compiles in ``gather``.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from contracts.deadlines import SERVING_DEADLINE_NS
from kernels import hostcopy
from kernels.compile import compiled, preload
from kernels.flight import flight_args
from kernels.markov_fused.exchange_layout import (
    CONTROL_WORDS,
    LAUNCH_WORD,
    MAX_RANKS,
    UNITS,
    buffer_bytes,
    gather_ctas,
    round_up,
    transfer_unit,
)

# Virtual ranks launch from several threads.
_LAUNCH_LOCK = threading.Lock()
# The public deadline policy's default (docs/interfaces.md): a diagnostic record and a trap after 10 minutes.
DEFAULT_TIMEOUT_NS = SERVING_DEADLINE_NS


def compile_gather(unit: int, options: str | None = None, *, flight: bool = True):
    """The compiled ``PeerGatherKernel`` at ``unit`` bytes per piece, with the flight recorder compiled in or not
    (``kernels.compile``: cached)."""
    from kernels.markov_fused.exchange_kernel import PeerGatherKernel  # CuTe DSL, imported on first compile

    return compiled(PeerGatherKernel(unit=unit, flight=flight), options, remedy="build MarkovKernels with a group")


def compile_variants(arch: str):
    """The compile gate's entries (``harness/compile_gate.py``): the gather at each piece size, and one without
    the flight recorder, no spills."""
    del arch  # the gate's options select the target
    variants = [(f"markov.peer_gather[u{unit}]", lambda options, u=unit: compile_gather(u, options), True)
                for unit in UNITS]
    variants.append((f"markov.peer_gather[u{UNITS[0]},noflight]",
                     lambda options: compile_gather(UNITS[0], options, flight=False), True))
    return variants


def check_timeout(timeout_ns: Any) -> int:
    """``timeout_ns``: a non-negative int (0: no deadline)."""
    if isinstance(timeout_ns, bool) or not isinstance(timeout_ns, int) or timeout_ns < 0:
        raise ValueError(f"timeout_ns: expected an int >= 0 (0: wait forever), got {timeout_ns!r}")
    return timeout_ns


class PeerGather:
    """One rank's tagged all-gather of up to ``slot_bytes`` bytes per rank over ``fabric`` (module docstring).

    Construction is collective (``fabric.alloc``); ``gather(tensor)`` is one
    kernel launch on the current stream and returns ``[world, *tensor.shape]``,
    a view of this instance's output buffer (valid until the next gather).
    ``flight_recorder``: the ``kernels.flight.FlightRecorder`` of the loop that
    owns the gather (its launches are recorded there as kernel ``gather``), or
    None: the kernel compiles without the recorder.
    """

    def __init__(self, fabric: Any, name: str, slot_bytes: int, *, timeout_ns: int = DEFAULT_TIMEOUT_NS,
                 diag: Any = None, flight_recorder: Any = None) -> None:
        for attr in ("rank", "world", "device", "alloc"):
            if not hasattr(fabric, attr):
                raise TypeError(f"fabric: expected a kernels.fabric provider (missing {attr!r}), "
                                f"got {type(fabric).__name__}")
        if not 1 <= fabric.world <= MAX_RANKS:
            raise ValueError(f"fabric: world must lie in [1, {MAX_RANKS}], got {fabric.world}")
        if isinstance(slot_bytes, bool) or not isinstance(slot_bytes, int) or slot_bytes < 1:
            raise ValueError(f"slot_bytes: expected an int >= 1, got {slot_bytes!r}")
        self.rank, self.world, self.device = int(fabric.rank), int(fabric.world), torch.device(fabric.device)
        self.slot_bytes = round_up(slot_bytes)
        self.timeout_ns = check_timeout(timeout_ns)
        self.diag_record = diag
        self.flight_recorder = flight_recorder
        self._kernels = {unit: compile_gather(unit, flight=flight_recorder is not None) for unit in UNITS}
        with torch.cuda.device(self.device):
            for kernel in self._kernels.values():
                preload(kernel)
        self.peer = fabric.alloc(name, buffer_bytes(self.world, self.slot_bytes))
        self.control = torch.zeros(CONTROL_WORDS, dtype=torch.int32, device=self.device)
        self.out = torch.empty(self.world * self.slot_bytes, dtype=torch.uint8, device=self.device)
        self._launches = 0

    def launches(self) -> int:
        """The device launch counter (after this stream's work)."""
        return int(hostcopy.to_host(self.control[LAUNCH_WORD:LAUNCH_WORD + 1])[0]) & 0xFFFFFFFF

    def gather(self, tensor: torch.Tensor, *, step: int = -1) -> torch.Tensor:
        """Every rank's ``tensor`` as ``[world, *tensor.shape]`` (this instance's output); ``step`` is
        recorded in a timeout's diagnostic record. Every rank must call it with the same shape and dtype."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"tensor: expected a torch.Tensor, got {type(tensor).__name__}")
        nbytes = tensor.numel() * tensor.element_size()
        if tensor.device != self.device or not tensor.is_contiguous() or nbytes == 0:
            raise ValueError(f"tensor: expected a non-empty contiguous tensor on {self.device}, got "
                             f"{tuple(tensor.shape)} on {tensor.device} (contiguous: {tensor.is_contiguous()})")
        if nbytes > self.slot_bytes or nbytes % 2:
            raise ValueError(f"tensor: {nbytes} bytes; this gather holds an even number up to {self.slot_bytes}")
        unit = transfer_unit(nbytes)
        if tensor.data_ptr() % unit:
            raise ValueError(f"tensor: expected {unit}-byte alignment for {nbytes} bytes, got address "
                             f"{tensor.data_ptr():#x}")
        pieces = nbytes // unit
        self._launch(self._kernels[unit], tensor.data_ptr(), pieces, step)
        return self.out[: self.world * nbytes].view(tensor.dtype).view(self.world, *tensor.shape)

    def _launch(self, kernel: Any, src: int, pieces: int, step: int) -> None:
        """One launch of the gather kernel on the current stream."""
        import cuda.bindings.driver as cuda
        from cutlass import Int32, Int64

        diag = self.diag_record.address if self.diag_record is not None and self.timeout_ns else 0
        stream = cuda.CUstream(torch.cuda.current_stream(self.device).cuda_stream)
        pointers = (src, self.out.data_ptr(), self.peer.peer_ptrs.data_ptr(), self.control.data_ptr(),
                    self.slot_bytes, diag, self.timeout_ns)
        sizes = (pieces, self.rank, self.world, step, gather_ctas(pieces))
        with _LAUNCH_LOCK:
            kernel(*[Int64(p) for p in pointers], *[Int32(s) for s in sizes], *flight_args(self.flight_recorder),
                   stream)
        self._launches = (self._launches + 1) & 0xFFFFFFFF


__all__ = ["DEFAULT_TIMEOUT_NS", "PeerGather", "check_timeout", "compile_gather", "compile_variants"]
