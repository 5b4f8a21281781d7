"""Layout, tags and work split of the fused loop's device all-gather (``kernels.markov_fused.exchange``).

Nothing here touches a GPU or CuTe DSL: the device kernel
(``exchange_kernel.py``) and the host class (``exchange.py``) take their
sizes and arithmetic from here, and the CPU tests check them, including a
pure-Python model of the protocol (``ExchangeModel``) that replays the
interleavings a slow rank allows.

Peer buffer of one gather (bytes; one per rank, allocated through the
fabric, zero-filled):

- ``[0, FLAGS_BYTES)``: flags, uint64 ``[2 parity][MAX_RANKS][MAX_CTAS]``;
  flag ``(p, k, c)`` is written by rank k's CTA c and read by the owner of
  the buffer: bytes 0-3 the launch's tag, bytes 4-7 the call's payload bytes
  (``flag_word``). One 64-bit store posts both, so a reader that sees the
  tag sees the size the writer called with; a size other than its own is a
  call mismatch, named at once instead of gathered as mixed data.
- ``[FLAGS_BYTES, ...)``: payload, ``[2 parity][world][slot_bytes]``;
  ``(p, k)`` holds rank k's contribution of a launch of parity p.

Control words (this rank only, int32 ``[CONTROL_WORDS]``, zero at
construction): ``LAUNCH_WORD`` the uint32 launch counter, ``END_WORD`` the
CTAs that finished the current launch, ``CLAIM_WORD`` the timeout claim (the
first thread whose wait times out adds 1 and, finding 0, alone writes the
diagnostic record; it is never reset: the trap ends the context).

Tag and parity of a launch whose counter reads n: ``tag = 1 + n mod 2**31``
(never 0, the zero-filled flag) and ``parity = n & 1``. Slot ``(p, k)`` is
rewritten every second launch; a reader of launch n can only find there the
tag of launch n or of n - 2 (``ExchangeModel`` shows why), which differ.

Work split: the payload moves in ``unit``-byte pieces (16 when the size
allows, else 2; the source then must be 16-byte aligned); CTA c of ``ctas`` moves pieces ``[c * share,
min((c + 1) * share, pieces))`` (``cta_share``) to every rank and later
copies the same range of every rank's slot out, so it waits only for the
flags of CTA c of every rank: no CTA waits for another CTA of its own grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

THREADS = 128
MAX_RANKS = 32
MAX_CTAS = 16
FLAG_BYTES = 8
FLAGS_BYTES = 2 * MAX_RANKS * MAX_CTAS * FLAG_BYTES
LAUNCH_WORD, END_WORD, CLAIM_WORD = 0, 1, 2
CONTROL_WORDS = 4
TAG_PERIOD = 1 << 31
# Pieces one CTA moves before another CTA is worth adding.
PIECES_PER_CTA = 4 * THREADS
UNITS = (16, 2)


def tag_of(launch: int) -> int:
    """The tag of the launch whose counter reads ``launch`` (uint32): ``1 + launch mod 2**31``, never 0."""
    return 1 + (launch & 0xFFFFFFFF) % TAG_PERIOD


def flag_word(tag: int, nbytes: int) -> int:
    """The 64-bit flag a launch posts: its ``tag`` in the low word, the call's payload ``nbytes`` in the high."""
    return (tag & 0xFFFFFFFF) | (nbytes & 0xFFFFFFFF) << 32


def parity_of(launch: int) -> int:
    """The payload and flag half a launch uses: ``launch & 1``."""
    return launch & 1


def round_up(nbytes: int, multiple: int = 16) -> int:
    """``nbytes`` rounded up to a multiple of ``multiple``."""
    return -(-nbytes // multiple) * multiple


def buffer_bytes(world: int, slot_bytes: int) -> int:
    """Bytes of one rank's peer buffer: the flags, then both parities' payload slots of every rank."""
    return FLAGS_BYTES + 2 * world * slot_bytes


def flag_offset(parity: int, rank: int, cta: int) -> int:
    """Byte offset in a peer buffer of the flag rank ``rank``'s CTA ``cta`` posts in launches of ``parity``."""
    return ((parity * MAX_RANKS + rank) * MAX_CTAS + cta) * FLAG_BYTES


def slot_offset(parity: int, rank: int, world: int, slot_bytes: int) -> int:
    """Byte offset in a peer buffer of rank ``rank``'s payload slot for launches of ``parity``."""
    return FLAGS_BYTES + (parity * world + rank) * slot_bytes


def transfer_unit(nbytes: int) -> int:
    """Bytes per piece: 16 when ``nbytes`` is a multiple of 16, else 2 (BF16). It depends on the size
    alone, which every rank shares, so every rank's launch has the same pieces and CTAs."""
    return 16 if nbytes % 16 == 0 else 2


def gather_ctas(pieces: int) -> int:
    """CTAs of a launch moving ``pieces`` pieces: one per ``PIECES_PER_CTA``, at least 1, at most ``MAX_CTAS``.
    Every rank derives it from the same size, so every rank's CTA c moves the same range."""
    return max(1, min(MAX_CTAS, -(-pieces // PIECES_PER_CTA)))


def cta_share(pieces: int, ctas: int, cta: int) -> tuple[int, int]:
    """The ``[begin, end)`` pieces CTA ``cta`` of ``ctas`` moves (possibly empty)."""
    share = -(-pieces // ctas)
    begin = min(cta * share, pieces)
    return begin, min(begin + share, pieces)


class CallMismatch(RuntimeError):
    """A peer's flag carried this launch's tag with another call size (the kernel's CALL_MISMATCH record)."""


@dataclass
class ExchangeModel:
    """A pure-Python model of the protocol for CPU tests: ranks' launches as explicit phases.

    ``post(rank, payload, nbytes)`` is a rank's launch up to and including
    its flags (payload into every rank's slot, then ``flag_word(tag,
    nbytes)``); ``finish(rank)`` is the rest (wait for every rank's tag,
    compare its size, copy out, advance the counter) and returns what it
    copied, raises ``RuntimeError`` when a flag does not carry the tag (a
    real kernel would keep polling) and ``CallMismatch`` when a flag carries
    the tag with another size than the rank's own. ``post`` refuses to run
    ahead of what stream order allows: a rank posts launch n only after it
    finished n - 1.
    """

    world: int
    launches: list = field(default_factory=list)
    flags: dict = field(default_factory=dict)  # (owner, parity, writer) -> flag_word(tag, nbytes)
    slots: dict = field(default_factory=dict)  # (owner, parity, writer) -> payload
    posted: list = field(default_factory=list)  # a rank's posted size, or None

    def __post_init__(self) -> None:
        self.launches = [0] * self.world
        self.posted = [None] * self.world

    def post(self, rank: int, payload: object, nbytes: int = 16) -> None:
        """Rank ``rank`` writes ``payload`` into every rank's slot of its launch's parity, then its flag."""
        if self.posted[rank] is not None:
            raise RuntimeError(f"rank {rank} posts launch {self.launches[rank] + 1} before finishing its previous")
        n = self.launches[rank]
        for owner in range(self.world):
            self.slots[owner, parity_of(n), rank] = payload
            self.flags[owner, parity_of(n), rank] = flag_word(tag_of(n), nbytes)
        self.posted[rank] = nbytes

    def ready(self, rank: int) -> bool:
        """Whether every flag of rank ``rank``'s current launch carries its tag (its wait would end)."""
        n = self.launches[rank]
        return all(self.flags.get((rank, parity_of(n), k), 0) & 0xFFFFFFFF == tag_of(n) for k in range(self.world))

    def finish(self, rank: int) -> list:
        """Rank ``rank``'s wait, size check and copy-out: every rank's payload of its current launch."""
        n = self.launches[rank]
        if self.posted[rank] is None or not self.ready(rank):
            raise RuntimeError(f"rank {rank} launch {n}: a flag does not carry tag {tag_of(n)} yet")
        for k in range(self.world):
            size = self.flags[rank, parity_of(n), k] >> 32
            if size != self.posted[rank]:
                raise CallMismatch(f"rank {rank} launch {n}: rank {k} called with {size} bytes, "
                                   f"this rank with {self.posted[rank]}")
        out = [self.slots[rank, parity_of(n), k] for k in range(self.world)]
        self.launches[rank] = (n + 1) & 0xFFFFFFFF
        self.posted[rank] = None
        return out


__all__ = [
    "CLAIM_WORD",
    "CallMismatch",
    "CONTROL_WORDS",
    "END_WORD",
    "ExchangeModel",
    "FLAGS_BYTES",
    "LAUNCH_WORD",
    "MAX_CTAS",
    "MAX_RANKS",
    "PIECES_PER_CTA",
    "TAG_PERIOD",
    "THREADS",
    "UNITS",
    "buffer_bytes",
    "cta_share",
    "flag_offset",
    "flag_word",
    "gather_ctas",
    "parity_of",
    "round_up",
    "slot_offset",
    "tag_of",
    "transfer_unit",
]
