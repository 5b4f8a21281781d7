"""The flight recorder's device writers: one launch record begun and ended by one thread each.

The ring, its record layout in bytes and its memory ordering are
``kernels.flight``'s docstring; this module is what a kernel calls.

A kernel takes the ring as one argument group, ``FlightRing(records,
words, mask)`` (the three values of ``FlightRecorder.args()``: the record
array's device address in host-mapped memory, the instance's device counter
words, capacity - 1), and, with its class's ``flight`` flag on (a
compile-time part of its variant), calls

- ``record_begin(ring, ident, kernel, fields, writer)`` once near its start:
  the thread where ``writer`` is non-zero (``leader()``: thread 0 of CTA 0)
  takes the launch number from the counter (``atom.add.relaxed.gpu``: a
  graph replay counts as a launch, as every launch does), keeps it in the
  kernel's word ``words[1 + kernel]`` and stores words 0-11 of the slot
  (``fields`` = tag, parity, rows, steps, digest, aux as 32-bit values);
  A kernel that learns its tag only after a programmatic-dependent-launch
  wait takes the number first (``take``, before the wait, where the
  atomic's latency overlaps the wait) and passes it to ``begin`` after;
- ``record_end(ring, kernel, writer, launch)`` at its completion point: the
  thread where ``writer`` is non-zero (the last CTA to finish, where the
  kernel counts them, else ``leader()`` at the end) stores ``end_ns`` and
  ``end_status | end_launch << 32``; the thread that began the record passes
  the number it kept (``begin`` returns it: one register, no load at the
  kernel's tail), another reads it back from the kernel's word.

A ring address of 0 (a host class built without CUDA-mapped memory) skips
both at run time; ``begin``/``end`` take the class's flag and trace nothing
when it is off, and ``key_part`` adds ``"noflight"`` to such a variant's key.
``digest(values)`` folds the scalar arguments that must agree across ranks
(FNV-1a over 32-bit words, ``kernels.flight.digest`` on the host).
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32

from kernels import ptx
from kernels.flight import (CHECKSUM_SEED, FNV_OFFSET, FNV_PRIME, RECORD_BYTES, STATUS_ENDED, W_CHECK, W_END_LO,
                            W_END_STATUS)


class FlightRing(NamedTuple):
    """The flight recorder's arguments: record array (host-mapped, 0: off), device counter words, capacity - 1."""

    records: Int64
    words: Int64
    mask: Int32


def leader() -> Int32:
    """1 on thread 0 of CTA 0 (every index 0), else 0."""
    tx, ty, tz = cute.arch.thread_idx()
    bx, by, bz = cute.arch.block_idx()
    return Int32((tx == 0) & (ty == 0) & (tz == 0) & (bx == 0) & (by == 0) & (bz == 0))


def digest(values) -> Uint32:
    """FNV-1a of ``values`` (each as its 32 bits), straight-line."""
    h = Uint32(FNV_OFFSET)
    for value in values:
        h = (h ^ Uint32(value)) * Uint32(FNV_PRIME)
    return h


def _pair(lo, hi) -> Int64:
    """Two 32-bit words as one little-endian 64-bit store value (``lo`` at the lower address)."""
    return (Int64(Uint32(hi)) << 32) | (Int64(Uint32(lo)) & 0xFFFFFFFF)


def _slot(ring: FlightRing, launch: Uint32) -> Int64:
    """The address of the record of ``launch``."""
    return ring.records + Int64(launch & Uint32(ring.mask)) * RECORD_BYTES


@cute.jit
def take_launch(ring: FlightRing, kernel: cutlass.Constexpr, writer: Int32) -> Uint32:
    """On the writer thread: this launch's number from the counter, kept in the kernel's word (0 elsewhere)."""
    launch = Uint32(0)
    if (writer != Int32(0)) & (ring.records != Int64(0)):
        launch = ptx.atom_add_u32(ring.words, Uint32(1), "relaxed", "gpu")
        ptx.st_ordered_b32(ring.words + 4 * (1 + kernel), launch, "relaxed", "gpu")
    return launch


@cute.jit
def store_begin(ring: FlightRing, ident: cutlass.Constexpr, fields, writer: Int32, launch: Uint32):
    """On the writer thread: the begin of ``launch``'s record (words 0-11)."""
    if (writer != Int32(0)) & (ring.records != Int64(0)):
        start = ptx.globaltimer()
        gx, gy, gz = cute.arch.grid_dim()
        tag, parity, rows, steps, digest_value, aux = fields
        words = [launch, Uint32(ident), Uint32(tag), Uint32(parity), Uint32(rows), Uint32(steps),
                 Uint32(digest_value), Uint32(gx * gy * gz), Uint32(start & 0xFFFFFFFF),
                 Uint32((start >> 32) & 0xFFFFFFFF), Uint32(aux)]
        check = Uint32(CHECKSUM_SEED)
        for i in cutlass.range_constexpr(W_CHECK):
            check = check + words[i] * Uint32(2 * i + 1)
        words.append(check)
        slot = _slot(ring, launch)
        for pair in cutlass.range_constexpr(W_CHECK // 2 + 1):
            ptx.st_ordered_b64(slot + 8 * pair, _pair(words[2 * pair], words[2 * pair + 1]), "relaxed", "sys")


def record_begin(ring: FlightRing, ident: int, kernel: int, fields, writer, launch=None) -> Uint32:
    """On the writer thread: take the launch's number (unless ``launch``, from ``take_launch``, is given) and
    store the record's begin; the number is returned (0 on other threads)."""
    if launch is None:
        launch = take_launch(ring, kernel, writer)
    store_begin(ring, ident, fields, writer, launch)
    return launch


@cute.jit
def latest_launch(ring: FlightRing, kernel: cutlass.Constexpr, writer: Int32) -> Uint32:
    """On the writer thread: the number of the kernel's latest begun launch, from its device word (0 elsewhere)."""
    launch = Uint32(0)
    if (writer != Int32(0)) & (ring.records != Int64(0)):
        launch = ptx.ld_ordered_b32(ring.words + 4 * (1 + kernel), "relaxed", "gpu")
    return launch


@cute.jit
def store_end(ring: FlightRing, writer: Int32, launch: Uint32):
    """On the writer thread: the end stamp and ``ended`` of ``launch``'s record."""
    if (writer != Int32(0)) & (ring.records != Int64(0)):
        slot = _slot(ring, launch)
        ptx.st_ordered_b64(slot + 4 * W_END_LO, ptx.globaltimer(), "relaxed", "sys")
        ptx.st_ordered_b64(slot + 4 * W_END_STATUS, _pair(Uint32(STATUS_ENDED), launch), "relaxed", "sys")


def record_end(ring: FlightRing, kernel: int, writer, launch=None) -> None:
    """On the writer thread: end the record of ``launch`` (when the writer began it and kept the number), else of
    the kernel's latest begun launch (read back from its device word)."""
    if launch is None:
        launch = latest_launch(ring, kernel, writer)
    store_end(ring, writer, launch)


def checked_flag(flight) -> bool:
    """``flight`` when it is a bool (a kernel class's compile-time flag), else ``TypeError``."""
    if not isinstance(flight, bool):
        raise TypeError(f"flight: expected a bool, got {flight!r}")
    return flight


def key_part(flight: bool) -> tuple:
    """What the flag adds to a kernel's ``key()``: nothing when on (the default), ``("noflight",)`` when off."""
    return () if flight else ("noflight",)


def take(flight: bool, ring: FlightRing, kernel: int, writer=None):
    """``take_launch`` when ``flight`` is compiled in (writer: ``leader()`` unless given), else None: for a kernel
    that begins its record only once it knows its tag (after a PDL wait), the counter's atomic goes first."""
    return take_launch(ring, kernel, leader() if writer is None else writer) if flight else None


def begin(flight: bool, ring: FlightRing, ident: int, kernel: int, fields, writer=None, launch=None):
    """``record_begin`` when ``flight`` is compiled in (writer: ``leader()`` unless given; ``launch`` from
    ``take``), returning the launch's number for an ``end`` by the same thread; nothing traced (None) otherwise."""
    if flight:
        return record_begin(ring, ident, kernel, fields, leader() if writer is None else writer, launch)
    return None


def end(flight: bool, ring: FlightRing, kernel: int, writer=None, launch=None) -> None:
    """``record_end`` when ``flight`` is compiled in (writer: ``leader()`` unless given; ``launch``: what
    ``begin`` returned on the same thread, which spares reading it back); nothing traced otherwise."""
    if flight:
        record_end(ring, kernel, leader() if writer is None else writer, launch)


__all__ = ["FlightRing", "begin", "checked_flag", "digest", "end", "key_part", "latest_launch", "leader",
           "record_begin", "record_end", "store_begin", "store_end", "take", "take_launch"]
