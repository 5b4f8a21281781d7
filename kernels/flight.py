"""The flight recorder: a ring of the last launches of one kernel instance, readable from outside the rank.

Why. A Python-side recorder sees a call only when Python makes it: during a
CUDA-graph replay it sees nothing, and after a trap or a ``kill`` the rank
can dump nothing. Each instance of a family (``ShardedMarkovSampler``,
``MarkovKernels``, ``AllReduceMHC``) therefore owns a ring of fixed 64-byte
records in host memory that its kernels write themselves, one record per
launch, graph replays included; another process (the harness, or
``rankcheck``) reads every rank's ring while the rank spins in a wait or
after it died, and ``first_divergence`` names the first launch where the
ranks' records differ or where one rank stopped.

Backing. The ring is a file (``<directory>/<name>.ring``), mapped
``MAP_SHARED`` and registered with ``cudaHostRegister(Mapped | Portable)``;
the kernels store to its device address (``cudaHostGetDevicePointer``, the
host address itself on UVA systems), and the stores land in the page cache
of the file, which outlives the process. Linux refuses to pin a writable
file-backed mapping long-term except on shmem, so when the directory is not
on tmpfs the file is created under ``/dev/shm`` and ``<directory>/<name>.ring``
is a symbolic link to it (``read_ring`` follows it; ``collect`` copies it
into the directory and unlinks the shmem file). Where neither can be
registered, the ring lives in pinned host memory (``torch``) and
``dump()`` writes its bytes to the file (at interpreter exit, and whenever
called): a trap is then still survived, a ``kill`` is not. A recorder that
is dropped does not unregister its mapping there and then: it is retired,
and ``release_retired`` (called by the next recorder's registration, and by
whoever knows no kernel of the process is in flight) unregisters and unmaps
it (the file keeps the records). ``cudaHostUnregister`` waits for the whole
device to idle; run by the garbage collector in a virtual rank's thread
while that rank's exchange kernel spins for a peer, it blocked the peer's
launch in the driver, and the exchange timed out and trapped (seen on the
H200: a loop dropped right after its last launch, and garbage of an earlier
test collected mid-call). Without CUDA (``device=None``) the ring is only a
file, for the CPU tests and the reader.

File layout (little-endian). A 64-byte header, then ``capacity`` records
of 64 bytes (``capacity`` a power of two, so ``slot = launch mod
capacity`` stays continuous when the uint32 counter wraps).

Header (16 uint32 words):

======  ====  ============  =================================================
offset  word  field         meaning
======  ====  ============  =================================================
0       0     magic         0x52464352 (bytes "RCFR")
4       1     version       1
8       2     record_bytes  64
12      3     capacity      records in the ring (a power of two)
16      4     family        ``FAMILIES`` code of the instance
20      5     rank          the rank that owns the ring
24      6     world         ranks in its group
28      7     pid           the process that created the ring
32-63   8-15  name          the instance name (ASCII, NUL padded): the same
                            on every rank for instances that launch together
======  ====  ============  =================================================

Record (16 uint32 words), slot ``launch & (capacity - 1)``:

======  ====  ============  =================================================
offset  word  field         meaning
======  ====  ============  =================================================
0       0     launch        this launch's number: the instance's device
                            counter (``atom.add`` at begin), so replays count
4       1     ident         family (bits 0-7), kernel (8-15), protocol
                            (16-23: 0 none, 1 LL, 2 BT), record version (24-31)
8       2     tag           the launch's tag or Lamport generation
12      3     parity        its parity (mailbox half)
16      4     rows          request rows or tokens
20      5     steps         steps (0 where the kernel has none)
24      6     digest        FNV-1a of the scalar arguments that must agree
                            across ranks (``digest``)
28      7     ctas          the grid's CTAs (not compared: ranks sharing a
                            GPU may get other shares)
32      8-9   start_ns      ``%globaltimer`` at begin (uint64)
40      10    aux           a family's extra field (the fused loop's step)
44      11    check         ``checksum(words 0..10)``: the begin is complete
48      12-13 end_ns        ``%globaltimer`` at the completion point (uint64)
56      14    end_status    1 ended, 2 timed out (0: not ended)
60      15    end_launch    the launch the end belongs to (== word 0 when
                            this slot's launch ended)
======  ====  ============  =================================================

Memory ordering. One thread writes the begin (thread 0 of CTA 0 at the
kernel's start, after its counter ``atom.add.relaxed.gpu``) as six
``st.relaxed.sys.global.b64``; one thread writes the end at the kernel's
completion point (the last CTA for a kernel that counts its CTAs, else CTA
0 at its end) as two: ``end_ns``, then ``end_status | end_launch << 32``
in one 8-byte store, so an end is never taken for a later launch's. No
``membar.sys``: it would put a PCIe round trip on the kernel's critical
path, and it is not needed for what the record is for (a rank spinning in
a wait until its deadline has long had its begin land in host memory;
kernel completion makes an end visible to the host). A reader racing a
writer can see a half-written begin: ``check`` exposes it (the record is
reported as torn, not compared). The begin's thread also stores the launch
number into the instance's device word of that kernel (``words[1 +
kernel]``), where the end's thread reads it.

Device counter words (device ``int32 [16]``, owned by the instance): word 0
the launch counter, word ``1 + kernel`` the launch number of the kernel's
latest begin (kernel < 15).

Families. The flight code does not list the kernel families: each family's
package under ``kernels/`` declares ``FLIGHT_CODE`` (its header and ``ident``
code, 1 to 255) and ``FLIGHT_KERNELS`` (its kernels' names, in the order of
their numbers) in its ``__init__``, and ``declared_families`` finds them by
importing every subpackage of ``kernels`` (whose ``__init__`` imports
neither CuTe DSL nor torch) when this module loads. ``FAMILIES`` (name to
code) and ``KERNELS`` (name to kernel names) are what it found; the
family's name is its folder's. A new family is found by being there; two
packages declaring one code fail the import.

The device writers are in ``kernels.flight_device`` (CuTe DSL); this module
needs only the standard library (and torch / cuda-bindings for a ring
registered with CUDA), so the harness reads rings on machines without
either.
"""

from __future__ import annotations

import atexit
import importlib
import mmap
import os
import pkgutil
import struct
import tempfile
import threading
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

MAGIC = 0x52464352
VERSION = 1
RECORD_BYTES = 64
HEADER_BYTES = 64
RECORD_WORDS = RECORD_BYTES // 4
DEFAULT_CAPACITY = 256
DEVICE_WORDS = 16
NAME_BYTES = 32
CHECKSUM_SEED = 0xA5A5A5A5
FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193
DIRECTORY_VAR = "RANKCHECK_FLIGHT_DIR"
RUN_ID_VAR = "TORCHELASTIC_RUN_ID"
SHM_DIRECTORY = "/dev/shm"
RING_SUFFIX = ".ring"

PROTOCOLS = ("none", "ll", "bt")
STATUS_ENDED, STATUS_TIMED_OUT = 1, 2

# Record word indices.
W_LAUNCH, W_IDENT, W_TAG, W_PARITY, W_ROWS, W_STEPS, W_DIGEST, W_CTAS = range(8)
W_START_LO, W_START_HI, W_AUX, W_CHECK, W_END_LO, W_END_HI, W_END_STATUS, W_END_LAUNCH = range(8, 16)
# The begin's fields that every rank's record of one launch must agree on.
COMPARED = ("family", "kernel", "protocol", "tag", "parity", "rows", "steps", "digest", "aux")

_U32 = 0xFFFFFFFF
_HEADER = struct.Struct("<8I32s")
_RECORD = struct.Struct("<16I")


def declared_families(package: str = __package__ or "kernels") -> tuple[dict[str, int], dict[str, tuple[str, ...]]]:
    """``(FAMILIES, KERNELS)`` as the subpackages of ``package`` declare them (module docstring), by code."""
    found: dict[str, tuple[int, tuple[str, ...]]] = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).resolve().parent)]), key=lambda m: m.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        code, kernels = getattr(module, "FLIGHT_CODE", None), getattr(module, "FLIGHT_KERNELS", None)
        if code is None:
            continue
        if not (isinstance(code, int) and 0 < code < 256) or not kernels or len(kernels) > 15:
            raise ValueError(f"{module.__name__}: FLIGHT_CODE must be 1..255 and FLIGHT_KERNELS 1 to 15 names, "
                             f"got {code!r}, {kernels!r}")
        taken = [name for name, (other, _) in found.items() if other == code]
        if taken:
            raise ValueError(f"{module.__name__}: FLIGHT_CODE {code} is already {taken[0]}'s")
        found[info.name] = (code, tuple(kernels))
    ordered = sorted(found.items(), key=lambda item: item[1][0])
    return {name: code for name, (code, _) in ordered}, {name: kernels for name, (_, kernels) in ordered}


FAMILIES, KERNELS = declared_families()


class FlightFormatError(ValueError):
    """A file is not a flight-recorder ring of a known version."""


def checksum(words: Sequence[int]) -> int:
    """``check`` of record words 0..10, as the device computes it: seed plus word i times (2 i + 1), mod 2^32."""
    if len(words) != W_CHECK:
        raise ValueError(f"checksum: expected {W_CHECK} words, got {len(words)}")
    total = CHECKSUM_SEED
    for index, word in enumerate(words):
        total = (total + (int(word) & _U32) * (2 * index + 1)) & _U32
    return total


def digest(values: Iterable[int]) -> int:
    """FNV-1a over 32-bit words (each value's low 32 bits), as the device computes a record's ``digest``."""
    h = FNV_OFFSET
    for value in values:
        h = ((h ^ (int(value) & _U32)) * FNV_PRIME) & _U32
    return h


def ident(family: str, kernel: str, protocol: str = "none") -> int:
    """The record's ``ident`` word for ``family``'s ``kernel`` under ``protocol``."""
    if family not in FAMILIES:
        raise ValueError(f"family: expected one of {sorted(FAMILIES)}, got {family!r}")
    if kernel not in KERNELS[family]:
        raise ValueError(f"kernel: expected one of {KERNELS[family]} for {family}, got {kernel!r}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol: expected one of {PROTOCOLS}, got {protocol!r}")
    return FAMILIES[family] | KERNELS[family].index(kernel) << 8 | PROTOCOLS.index(protocol) << 16 | VERSION << 24


def kernel_index(family: str, kernel: str) -> int:
    """The kernel's number within its family (its device word is ``1 +`` it)."""
    return KERNELS[family].index(kernel)


@dataclass(frozen=True)
class LaunchRecord:
    """One decoded record."""

    launch: int
    family: str
    kernel: str
    protocol: str
    tag: int
    parity: int
    rows: int
    steps: int
    digest: int
    ctas: int
    start_ns: int
    aux: int
    status: str  # "begun", "ended", "timed out"
    end_ns: int | None
    torn: bool = False

    def differences(self, other: "LaunchRecord") -> list[str]:
        """The compared fields where ``other`` differs, as ``field: mine vs theirs``."""
        return [f"{name} {getattr(self, name)} vs {getattr(other, name)}"
                for name in COMPARED if getattr(self, name) != getattr(other, name)]

    def describe(self) -> str:
        """A short text: kernel, protocol, tag, parity, rows, steps and status."""
        protocol = "" if self.protocol == "none" else f" {self.protocol.upper()}"
        return (f"{self.family}.{self.kernel}{protocol} tag {self.tag} parity {self.parity} rows {self.rows} "
                f"steps {self.steps} aux {self.aux} digest 0x{self.digest:08x} ({self.status})")


def _name_of(code: int, table: Sequence[str], what: str) -> str:
    """The name of ``code`` in ``table`` or ``<what> <code>``."""
    return table[code] if 0 <= code < len(table) else f"{what} {code}"


def encode_record(record: LaunchRecord) -> list[int]:
    """The 16 words a device writer leaves for ``record`` (``end_ns`` None: not ended)."""
    words = [0] * RECORD_WORDS
    words[W_LAUNCH] = record.launch & _U32
    words[W_IDENT] = ident(record.family, record.kernel, record.protocol)
    for index, value in ((W_TAG, record.tag), (W_PARITY, record.parity), (W_ROWS, record.rows),
                         (W_STEPS, record.steps), (W_DIGEST, record.digest), (W_CTAS, record.ctas),
                         (W_AUX, record.aux)):
        words[index] = value & _U32
    words[W_START_LO], words[W_START_HI] = record.start_ns & _U32, (record.start_ns >> 32) & _U32
    words[W_CHECK] = checksum(words[:W_CHECK])
    if record.status != "begun":
        end = record.end_ns or 0
        words[W_END_LO], words[W_END_HI] = end & _U32, (end >> 32) & _U32
        words[W_END_STATUS] = STATUS_ENDED if record.status == "ended" else STATUS_TIMED_OUT
        words[W_END_LAUNCH] = record.launch & _U32
    return words


def decode_record(words: Sequence[int]) -> LaunchRecord | None:
    """The record in 16 words, or None for a slot never written (all zero)."""
    if len(words) != RECORD_WORDS:
        raise FlightFormatError(f"a record has {RECORD_WORDS} words, got {len(words)}")
    w = [int(x) & _U32 for x in words]
    if not any(w):
        return None
    code = w[W_IDENT]
    family_names = {v: k for k, v in FAMILIES.items()}
    family = family_names.get(code & 0xFF, f"family {code & 0xFF}")
    kernels = KERNELS.get(family, ())
    ended = w[W_END_LAUNCH] == w[W_LAUNCH] and w[W_END_STATUS] in (STATUS_ENDED, STATUS_TIMED_OUT)
    status = "begun" if not ended else "ended" if w[W_END_STATUS] == STATUS_ENDED else "timed out"
    return LaunchRecord(
        launch=w[W_LAUNCH], family=family, kernel=_name_of((code >> 8) & 0xFF, kernels, "kernel"),
        protocol=_name_of((code >> 16) & 0xFF, PROTOCOLS, "protocol"), tag=w[W_TAG], parity=w[W_PARITY],
        rows=w[W_ROWS], steps=w[W_STEPS], digest=w[W_DIGEST], ctas=w[W_CTAS],
        start_ns=w[W_START_LO] | w[W_START_HI] << 32, aux=w[W_AUX], status=status,
        end_ns=(w[W_END_LO] | w[W_END_HI] << 32) if ended else None,
        torn=checksum(w[:W_CHECK]) != w[W_CHECK] or (code >> 24) != VERSION,
    )


@dataclass(frozen=True)
class RingHeader:
    """The decoded header of a ring file."""

    capacity: int
    family: str
    rank: int
    world: int
    pid: int
    name: str


def encode_header(header: RingHeader) -> bytes:
    """The 64 header bytes of ``header``."""
    name = header.name.encode("ascii")
    if len(name) > NAME_BYTES:
        raise ValueError(f"name: at most {NAME_BYTES} ASCII bytes, got {header.name!r}")
    return _HEADER.pack(MAGIC, VERSION, RECORD_BYTES, header.capacity, FAMILIES[header.family], header.rank,
                        header.world, header.pid, name)


def decode_header(data: bytes, where: str = "ring") -> RingHeader:
    """The header at the start of ``data``; ``FlightFormatError`` naming ``where`` when it is not one."""
    if len(data) < HEADER_BYTES:
        raise FlightFormatError(f"{where}: {len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, record_bytes, capacity, family, rank, world, pid, name = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FlightFormatError(f"{where}: magic 0x{magic:08X}, expected 0x{MAGIC:08X} (not a flight ring)")
    if version != VERSION or record_bytes != RECORD_BYTES:
        raise FlightFormatError(f"{where}: version {version} with {record_bytes}-byte records; this reader knows "
                                f"version {VERSION} with {RECORD_BYTES}")
    if capacity == 0 or capacity & (capacity - 1):
        raise FlightFormatError(f"{where}: capacity {capacity} is not a power of two")
    family_names = {v: k for k, v in FAMILIES.items()}
    if family not in family_names:
        raise FlightFormatError(f"{where}: unknown family code {family}")
    return RingHeader(capacity, family_names[family], rank, world, pid, name.rstrip(b"\0").decode("ascii", "replace"))


@dataclass(frozen=True)
class Ring:
    """A ring as read from its file: the header and every written record, in slot order."""

    path: str
    header: RingHeader
    records: tuple[LaunchRecord, ...]


def read_ring(path: str | os.PathLike) -> Ring:
    """Read a ring file (following a link to ``/dev/shm``); ``FlightFormatError`` for a file of another kind."""
    data = Path(path).read_bytes()
    header = decode_header(data, str(path))
    expected = HEADER_BYTES + header.capacity * RECORD_BYTES
    if len(data) < expected:
        raise FlightFormatError(f"{path}: {len(data)} bytes, expected {expected} for {header.capacity} records")
    records = []
    for slot in range(header.capacity):
        record = decode_record(_RECORD.unpack_from(data, HEADER_BYTES + slot * RECORD_BYTES))
        if record is not None:
            records.append(record)
    return Ring(str(path), header, tuple(records))


def ring_paths(directory: str | os.PathLike) -> list[Path]:
    """Every ``*.ring`` file under ``directory`` (recursively), sorted."""
    root = Path(directory)
    return sorted(root.rglob(f"*{RING_SUFFIX}")) if root.is_dir() else []


def collect(directory: str | os.PathLike) -> list[Path]:
    """Replace each ring link under ``directory`` by a copy of its ``/dev/shm`` file, which is then removed."""
    copied = []
    for path in ring_paths(directory):
        if path.is_symlink():
            target = Path(os.readlink(path))
            data = target.read_bytes() if target.exists() else None
            path.unlink()
            if data is not None:
                path.write_bytes(data)
                target.unlink()
                copied.append(path)
    return copied


# --------------------------------------------------------------------------- the reader


@dataclass(frozen=True)
class Finding:
    """The first launch where the ranks' records disagree or one rank stopped, or that they all agree."""

    instance: str
    family: str
    rank: int | None
    launch: int | None
    kernel: str | None
    what: str
    consistent: bool

    def describe(self) -> str:
        """One sentence for a report."""
        if self.consistent:
            return f"flight recorder, {self.instance}: {self.what}"
        return f"flight recorder, {self.instance}: rank {self.rank} launch {self.launch} ({self.kernel}): {self.what}"

    def to_json(self) -> dict:
        """The fields as a JSON-able dict, with ``text``."""
        return {**asdict(self), "text": self.describe()}


def _signed32(value: int) -> int:
    """A 32-bit difference read as int32 (serial-number arithmetic: the counter wraps)."""
    value &= _U32
    return value - (1 << 32) if value & 0x80000000 else value


def _unwrapped(records: Sequence[LaunchRecord], reference: int) -> dict[int, LaunchRecord]:
    """``records`` keyed by launch number relative to ``reference`` (negative: earlier), across counter wrap."""
    return {_signed32(r.launch - reference): r for r in records}


def _group(rings: Iterable[Ring]) -> dict[tuple[str, str], dict[int, Ring]]:
    """Rings by (family, instance name), then by rank."""
    groups: dict[tuple[str, str], dict[int, Ring]] = {}
    for ring in rings:
        key = (ring.header.family, ring.header.name)
        by_rank = groups.setdefault(key, {})
        if ring.header.rank in by_rank:
            raise FlightFormatError(f"{ring.path}: a second ring of rank {ring.header.rank} for {key[1]} "
                                    f"(the other is {by_rank[ring.header.rank].path})")
        by_rank[ring.header.rank] = ring
    return groups


def _finding(instance: str, family: str, rank, launch, kernel, what: str) -> Finding:
    """A divergence finding."""
    return Finding(instance, family, rank, launch, kernel, what, False)


def compare_ranks(by_rank: Mapping[int, Ring]) -> Finding:
    """The first divergence among one instance's rings (one per rank), or a consistent finding.

    Launches are ordered by the counter relative to the newest launch any
    rank recorded (int32 differences, so the uint32 counter may wrap). Only
    launches every rank's ring can still hold are compared (a ring keeps the
    last ``capacity``). For each launch, in order: a rank without its record
    while another has one (it never began it), a torn record, fields that
    differ from the lowest rank's, or a rank whose record began and did not
    end while another rank's ended (it stopped inside). A launch begun and
    not ended on every rank is the finding when nothing came before.
    """
    first = next(iter(by_rank.values()))
    instance, family = first.header.name, first.header.family
    world = max(first.header.world, len(by_rank))
    missing_ranks = [r for r in range(world) if r not in by_rank]
    if missing_ranks:
        return _finding(instance, family, missing_ranks[0], None, None,
                        f"no ring from rank(s) {', '.join(map(str, missing_ranks))} (the rank never built the "
                        "instance, or its ring was not collected)")
    everything = [rec for ring in by_rank.values() for rec in ring.records]
    if not everything:
        return Finding(instance, family, None, None, None, "no launch recorded on any rank", True)
    reference = everything[0].launch
    newest = max(_signed32(rec.launch - reference) for rec in everything)
    keyed = {rank: _unwrapped(ring.records, (reference + newest) & _U32) for rank, ring in by_rank.items()}
    # Below the newest of the ranks' oldest records, some ring may have dropped a record it had.
    start = max(max(-(ring.header.capacity - 1) for ring in by_rank.values()), max(min(k) for k in keyed.values() if k))
    for offset in range(start, 1):
        launch = (reference + newest + offset) & _U32
        present = {rank: recs[offset] for rank, recs in keyed.items() if offset in recs}
        if not present:
            continue
        some = present[min(present)]
        absent = sorted(set(by_rank) - set(present))
        if absent:
            return _finding(instance, family, absent[0], launch, some.kernel,
                            f"no record (never began it) while rank(s) {', '.join(map(str, sorted(present)))} "
                            f"began {some.describe()}")
        torn = sorted(rank for rank, rec in present.items() if rec.torn)
        if torn:
            return _finding(instance, family, torn[0], launch, present[torn[0]].kernel,
                            "torn record (written while read, or corrupt)")
        base_rank = min(present)
        for rank in sorted(present):
            diffs = present[rank].differences(present[base_rank])
            if diffs:
                return _finding(instance, family, rank, launch, present[rank].kernel,
                                f"differs from rank {base_rank}: " + ", ".join(diffs))
        stopped = sorted(rank for rank, rec in present.items() if rec.status != "ended")
        if stopped and len(stopped) < len(present):
            status = present[stopped[0]].status
            return _finding(instance, family, stopped[0], launch, present[stopped[0]].kernel,
                            f"{status}, not ended, while rank(s) "
                            f"{', '.join(str(r) for r in sorted(present) if r not in stopped)} ended it")
        if stopped:
            return _finding(instance, family, stopped[0], launch, some.kernel,
                            f"every rank began {some.describe()} and none ended it (all wait inside)")
    return Finding(instance, family, None, (reference + newest) & _U32, None,
                   f"every rank's records agree up to launch {(reference + newest) & _U32}, all ended", True)


def first_divergence(rings: Iterable[Ring]) -> list[Finding]:
    """One finding per instance (family and name) among ``rings``, divergent ones first."""
    findings = [compare_ranks(by_rank) for by_rank in _group(rings).values()]
    return sorted(findings, key=lambda f: (f.consistent, f.family, f.instance))


def read_directory(directory: str | os.PathLike) -> tuple[list[Ring], list[str]]:
    """The rings under ``directory`` and a problem line for each file that is not a readable ring."""
    rings, problems = [], []
    for path in ring_paths(directory):
        try:
            rings.append(read_ring(path))
        except (OSError, FlightFormatError) as exc:
            problems.append(f"{path}: {exc}")
    return rings, problems


def directory_findings(directory: str | os.PathLike) -> tuple[list[Finding], list[str]]:
    """Every instance's finding from the rings under ``directory`` (links to ``/dev/shm`` collected first), and a
    problem line per file that is not a readable ring: what a job's own code calls after a hang or a timeout."""
    collect(directory)
    rings, problems = read_directory(directory)
    return first_divergence(rings), problems


# --------------------------------------------------------------------------- the writer's ring (host side)

_NAMES_LOCK = threading.Lock()
_ORDINALS: dict[tuple[str, str, int], int] = {}
_default_directory: str | None = None
_thread_directory = threading.local()


def set_directory(directory: str | os.PathLike | None, *, this_thread: bool = False) -> None:
    """Make ``directory`` the default for rings created from now on in this process, or with ``this_thread`` only
    in the calling thread (virtual ranks of several groups are threads of one process); None: back to the default."""
    global _default_directory
    chosen = None if directory is None else os.fspath(directory)
    if this_thread:
        _thread_directory.path = chosen
    else:
        _default_directory = chosen


def default_directory() -> Path:
    """This thread's ``set_directory``, else the process's, else ``$RANKCHECK_FLIGHT_DIR``, else
    ``rankcheck-flight-<uid>/<job>`` under ``/dev/shm`` (or tmp), ``<job>`` torchrun's run id (the same on every
    rank of one job, another for the next job) or, outside torchrun, ``pid<pid>``."""
    chosen = getattr(_thread_directory, "path", None) or _default_directory or os.environ.get(DIRECTORY_VAR)
    if chosen:
        return Path(chosen)
    base = SHM_DIRECTORY if os.path.isdir(SHM_DIRECTORY) else tempfile.gettempdir()
    job = os.environ.get(RUN_ID_VAR) or f"pid{os.getpid()}"
    return Path(base) / f"rankcheck-flight-{os.getuid()}" / job


def instance_name(family: str, rank: int, directory: str | os.PathLike = "") -> str:
    """``<family>.<n>``: the n-th instance of ``family`` this process built for ``rank`` with its ring in
    ``directory`` (the same on every rank of a job whose ranks build their instances in one order; counted per
    directory, so a harness case with its own directory starts at 0)."""
    key = (os.fspath(directory), family, rank)
    with _NAMES_LOCK:
        ordinal = _ORDINALS.get(key, 0)
        _ORDINALS[key] = ordinal + 1
    return f"{family}.{ordinal}"


def _on_shmem(directory: Path) -> bool:
    """Whether ``directory`` is on tmpfs (where a writable shared mapping may be pinned long-term)."""
    try:
        resolved = directory.resolve()
        with open("/proc/mounts") as fh:
            mounts = [line.split()[1:3] for line in fh]
    except OSError:
        return False
    best, fs = "", ""
    for point, kind in mounts:
        if (str(resolved) == point or str(resolved).startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, fs = point, kind
    return fs == "tmpfs"


class FlightRecorder:
    """One instance's ring (file-backed, mapped into the device when CUDA is there) and its device counter words.

    ``args()`` is the kernels' argument group (records address, counter
    words address, capacity mask); ``records()`` reads the ring back;
    ``path`` is the file another process reads.
    """

    def __init__(self, family: str, *, rank: int, world: int, device=None, capacity: int = DEFAULT_CAPACITY,
                 directory: str | os.PathLike | None = None, name: str | None = None) -> None:
        if family not in FAMILIES:
            raise ValueError(f"family: expected one of {sorted(FAMILIES)}, got {family!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 2 or capacity & (capacity - 1):
            raise ValueError(f"capacity: expected a power of two >= 2, got {capacity!r}")
        self.family, self.rank, self.world, self.capacity = family, int(rank), int(world), capacity
        self.directory = Path(directory) if directory is not None else default_directory()
        self.name = name or instance_name(family, self.rank, self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"{self.name}.r{self.rank}.p{os.getpid()}{RING_SUFFIX}"
        self.size = HEADER_BYTES + capacity * RECORD_BYTES
        header = encode_header(RingHeader(capacity, family, self.rank, self.world, os.getpid(), self.name))
        self.backing = self._map_file(self.path, header)
        self.mode, self._pinned, self.device_address = "file", None, 0
        self.words = None
        if device is not None:
            self._attach(device, header)
        if self._pinned is not None:
            atexit.register(self.dump)
        # Retired, not released, when dropped (module docstring): the mapping stays registered until a safe point.
        self._finalizer = weakref.finalize(self, _retire, self.backing, self.mode == "mapped")
        self._finalizer.atexit = False  # at exit the process's end unmaps it; a trapped context takes no calls

    def _map_file(self, path: Path, header: bytes):
        """Create ``path`` with ``header`` and zero records and map it shared."""
        with open(path, "wb") as fh:
            fh.write(header + bytes(self.size - HEADER_BYTES))
        with open(path, "r+b") as fh:
            return mmap.mmap(fh.fileno(), self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def _attach(self, device, header: bytes) -> None:
        """Register the mapping with CUDA (moving it to ``/dev/shm`` behind a link where needed), else pin a copy;
        allocate the device counter words."""
        import torch

        self.words = torch.zeros(DEVICE_WORDS, dtype=torch.int32, device=device)
        if not _on_shmem(self.directory) and os.path.isdir(SHM_DIRECTORY):
            # A unique name: one process runs many cases whose rings share their instance name, rank and pid.
            handle, shm_name = tempfile.mkstemp(prefix=f"rankcheck-flight-{os.getuid()}-", suffix=f"-{self.path.name}",
                                                dir=SHM_DIRECTORY)
            os.close(handle)
            shm_path = Path(shm_name)
            self.backing.close()
            self.path.unlink()
            self.backing = self._map_file(shm_path, header)
            os.symlink(shm_path, self.path)
        release_retired()  # registering waits for the device as unregistering does: one safe point serves both
        address = _register(self.backing, self.size)
        if address:
            self.mode, self.device_address = "mapped", address
            return
        self._pinned = torch.zeros(self.size, dtype=torch.uint8, pin_memory=True)
        self._pinned[:HEADER_BYTES] = torch.frombuffer(bytearray(header), dtype=torch.uint8)
        self.mode, self.device_address = "pinned", self._pinned.data_ptr()

    def args(self) -> tuple[int, int, int]:
        """``(records address, counter words address, capacity - 1)`` for the kernels (zeros without CUDA)."""
        if not self.device_address:
            return 0, 0, 0
        return self.device_address + HEADER_BYTES, self.words.data_ptr(), self.capacity - 1

    def raw(self) -> bytes:
        """The ring's bytes as they are now in host memory (no CUDA call)."""
        if self._pinned is not None:
            return self._pinned.numpy().tobytes()
        return bytes(self.backing[: self.size])

    def write(self, record: LaunchRecord) -> None:
        """Store ``record`` in its slot from the host (what a device writer does; for tests and the golden path)."""
        at = HEADER_BYTES + (record.launch & (self.capacity - 1)) * RECORD_BYTES
        data = _RECORD.pack(*encode_record(record))
        if self._pinned is not None:
            import torch

            self._pinned[at : at + RECORD_BYTES] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        else:
            self.backing[at : at + RECORD_BYTES] = data

    def records(self) -> Ring:
        """The ring as it is now, decoded."""
        data = self.raw()
        records = [decode_record(_RECORD.unpack_from(data, HEADER_BYTES + s * RECORD_BYTES)) for s in
                   range(self.capacity)]
        return Ring(str(self.path), decode_header(data, str(self.path)), tuple(r for r in records if r is not None))

    def dump(self) -> None:
        """Write a pinned ring's bytes to its file (a mapped ring is its file already)."""
        if self._pinned is not None:
            try:
                self.backing[: self.size] = self.raw()
                self.backing.flush()
            except (ValueError, OSError):  # closed mapping or file gone: nothing left to keep
                pass


def flight_recorder_of(enabled: bool, family: str, rank: int, world: int, device,
                       directory: str | os.PathLike | None = None) -> FlightRecorder | None:
    """A host class's recorder: a new ``FlightRecorder`` when ``enabled`` (a bool), None when not."""
    if not isinstance(enabled, bool):
        raise TypeError(f"flight_recorder: expected a bool, got {enabled!r}")
    return FlightRecorder(family, rank=rank, world=world, device=device, directory=directory) if enabled else None


def flight_args(recorder: FlightRecorder | None) -> tuple:
    """The kernels' ``FlightRing`` values (``Int64, Int64, Int32``) for ``recorder`` (zeros for None)."""
    from cutlass import Int32, Int64  # noqa: PLC0415 - only the launch path needs the DSL

    records, words, mask = recorder.args() if recorder is not None else (0, 0, 0)
    return Int64(records), Int64(words), Int32(mask)


def _host_address(backing: mmap.mmap) -> int:
    """The address of the mapping's first byte (the buffer export is released again at once)."""
    import ctypes

    view = ctypes.c_char.from_buffer(backing)
    try:
        return ctypes.addressof(view)
    finally:
        del view


# Mappings of dropped recorders awaiting ``release_retired``: (backing, registered) pairs.
_RETIRED: list[tuple[mmap.mmap, bool]] = []
_RETIRED_LOCK = threading.Lock()


def _retire(backing: mmap.mmap, registered: bool) -> None:
    """Queue a dropped recorder's mapping for ``release_retired`` (no CUDA call: safe in any thread at any time)."""
    with _RETIRED_LOCK:
        _RETIRED.append((backing, registered))


def release_retired() -> int:
    """Unregister and unmap every retired ring now; say how many. Call it only where no kernel of this process can
    be waiting for a host thread (``cudaHostUnregister`` waits for the device to idle)."""
    with _RETIRED_LOCK:
        retired = list(_RETIRED)
        _RETIRED.clear()
    for backing, registered in retired:
        _release(backing, registered)
    return len(retired)


def _release(backing: mmap.mmap, registered: bool) -> None:
    """Unregister a mapped ring from CUDA (when it was) and unmap it: the file keeps the records."""
    if registered:
        from cuda.bindings import runtime as cudart

        cudart.cudaHostUnregister(_host_address(backing))
    try:
        backing.close()
    except (BufferError, ValueError):
        pass


def _register(backing: mmap.mmap, size: int) -> int:
    """Register the mapping with CUDA, mapped and portable; its device address, or 0 where CUDA refuses."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return 0
    host = _host_address(backing)
    flags = cudart.cudaHostRegisterMapped | cudart.cudaHostRegisterPortable
    (err,) = cudart.cudaHostRegister(host, size, flags)
    if err != cudart.cudaError_t.cudaSuccess:
        cudart.cudaGetLastError()  # not sticky; cleared so later calls do not see it
        return 0
    err, device = cudart.cudaHostGetDevicePointer(host, 0)
    if err != cudart.cudaError_t.cudaSuccess:
        cudart.cudaHostUnregister(host)
        return 0
    return int(device)


__all__: Sequence[str] = (
    "COMPARED",
    "DEFAULT_CAPACITY",
    "DIRECTORY_VAR",
    "FAMILIES",
    "Finding",
    "FlightFormatError",
    "FlightRecorder",
    "KERNELS",
    "LaunchRecord",
    "Ring",
    "RingHeader",
    "checksum",
    "collect",
    "compare_ranks",
    "declared_families",
    "decode_record",
    "default_directory",
    "digest",
    "directory_findings",
    "encode_header",
    "encode_record",
    "first_divergence",
    "flight_args",
    "flight_recorder_of",
    "ident",
    "instance_name",
    "kernel_index",
    "read_directory",
    "read_ring",
    "release_retired",
    "set_directory",
)
