"""Peer memory: where every rank's buffers come from, and nothing else.

The kernels never see a process group. They take raw 64-bit addresses: their
own buffer, a device table ``int64 [world]`` holding every rank's base address
of the same buffer (as this rank must dereference it), and a multicast address
or 0. This module is the only code that knows how those addresses are made.

Contract of a fabric (``Fabric``)
---------------------------------
- ``rank``, ``world``, ``device``; ``provider`` names the implementation.
- ``alloc(name, spec) -> PeerBuffer`` is collective: every rank allocates the
  same buffers, in the same order, with the same sizes. ``spec`` is a byte
  count (a ``uint8 [nbytes]`` buffer) or ``(shape, dtype)``. Before anything is
  allocated, each rank's request (order index, name, shape, dtype, bytes) is
  exchanged; a disagreement raises ``FabricMismatch`` on every rank, naming both
  ranks' requests, instead of hanging inside a rendezvous. A buffer is
  zero-filled, and the zeros are visible to every rank, when ``alloc`` returns.
- ``barrier()``: this rank's queued device work is complete (its streams are
  synchronized), then every rank meets. After it, a rank's earlier writes into
  peers' buffers are visible to them.
- ``all_gather(t) -> [world, *t.shape]`` with rank k's tensor at index k, on
  ``t``'s device. With ``rank`` and ``world`` this is ``golden.comm.Comm``.

Every collective carries a small JSON header (operation, sequence number,
arguments) that is exchanged first and compared, so ranks that call different
collectives (one allocates while another gathers) are told so by name. Every
wait has a deadline (``timeout_s``): a rank that does not arrive makes the
others raise ``CollectiveTimeout``. A header travels as JSON in
``HEADER_BYTES`` bytes (``contracts.wire_header``); one that does not fit
raises ``HeaderTooLong`` on every provider, before any exchange.

``PeerBuffer``: ``local`` (this rank's tensor), ``address`` (its base),
``peer_addresses`` (host tuple), ``peer_ptrs`` (the ``int64 [world]`` device
table), ``peer_tensor(k)`` (rank k's buffer as a tensor this rank can read and
write), ``multicast_ptr`` (0 unless multicast is allowed, below).

Providers
---------
- ``SymmetricFabric(group)``: one process per rank, torch symmetric memory
  (``symm_mem.empty`` with an explicit device, ``rendezvous(t, group)``; peer
  addresses from ``get_remote_tensor(peer, shape, dtype).data_ptr()``, which
  keeps the allocation's offset inside a pooled segment). Ranks sharing a GPU
  need ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1`` and a gloo group (NCCL
  refuses two ranks on one GPU); construction checks both and names what is
  missing. Collective headers travel over the group (CPU tensors on gloo,
  device tensors on NCCL). With ``device="cpu"`` the collectives work and
  ``alloc`` refuses after the agreement (the CPU tests check the protocol
  over real gloo processes this way).
- ``VirtualFabric.create(world, device)``: ``world`` ranks in one process, on
  one device, one thread and one stream per rank (``VirtualFabric.run``);
  buffers are plain allocations, the collectives meet in-process
  (``contracts.rendezvous``, the slot table ``golden.comm.ThreadWorld``
  meets through too).

Multicast is used only where all of these hold on every rank (``multicast_gate``):
the symmetric-memory handle reports a non-zero ``multicast_ptr``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST`` is not exactly ``"1"``, and the explicit
opt-in ``RANKCHECK_ALLOW_MULTICAST=1`` is set. Otherwise ``multicast_ptr`` is 0
and kernels take their unicast variant (one store per peer through the table).

``fabric_of(group, device)`` is what the kernels' public constructors call:
a fabric given as the group is used as is, a ``torch.distributed`` group (or
None, the default group) gets a ``SymmetricFabric``.

Nothing here imports symmetric memory or touches CUDA at import time, so the
module imports on a CPU-only build.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

import torch

from contracts.rendezvous import SlotRendezvous, run_in_threads
from contracts.wire_header import HeaderTooLong, decode_header, encode_header  # noqa: F401 - HeaderTooLong re-exported
from kernels import hostcopy

HEADER_BYTES = 1024
ALLOW_MULTICAST_ENV = "RANKCHECK_ALLOW_MULTICAST"
DISABLE_MULTICAST_ENV = "TORCH_SYMM_MEM_DISABLE_MULTICAST"
OVERLAPPING_DEVICES_ENV = "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"


class FabricError(RuntimeError):
    """A fabric collective failed."""


class CollectiveTimeout(FabricError):
    """Ranks did not all reach a fabric collective before its deadline."""


class FabricMismatch(FabricError):
    """Ranks called a fabric collective with different arguments (or different collectives): a desynchronisation."""


@dataclass(frozen=True)
class AllocRequest:
    """One rank's request for a collective buffer: its order index, name, shape and dtype."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Size of the buffer in bytes."""
        count = 1
        for extent in self.shape:
            count *= extent
        return count * torch.empty((), dtype=self.dtype).element_size()

    def header(self) -> dict:
        """The JSON-able header exchanged before allocating."""
        return {
            "op": "alloc",
            "index": self.index,
            "name": self.name,
            "shape": list(self.shape),
            "dtype": str(self.dtype).removeprefix("torch."),
            "nbytes": self.nbytes,
        }


def describe_header(header: Mapping) -> str:
    """A one-line human description of a collective header."""
    op = header.get("op")
    seq = header.get("seq")
    if op == "alloc":
        return (
            f"alloc #{header['index']} {header['name']!r} {header['nbytes']} bytes "
            f"({header['dtype']} {header['shape']}) [collective {seq}]"
        )
    if op == "all_gather":
        return f"all_gather {header['dtype']} {header['shape']} [collective {seq}]"
    details = " ".join(f"{k}={v}" for k, v in sorted(header.items()) if k not in ("op", "seq"))
    return f"{op}{' ' + details if details else ''} [collective {seq}]"


def parse_alloc_spec(name: object, spec: object) -> tuple[tuple[int, ...], torch.dtype]:
    """Validate ``alloc``'s arguments and return ``(shape, dtype)``; raise naming the bad one."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"alloc: name must be a non-empty str, got {name!r}")
    if isinstance(spec, bool):
        raise TypeError(f"alloc {name!r}: spec must be a byte count or (shape, dtype), got {spec!r}")
    if isinstance(spec, int):
        if spec <= 0:
            raise ValueError(f"alloc {name!r}: nbytes must be > 0, got {spec}")
        return (spec,), torch.uint8
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise TypeError(f"alloc {name!r}: spec must be a byte count or (shape, dtype), got {spec!r}")
    shape, dtype = spec
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"alloc {name!r}: dtype must be a torch.dtype, got {dtype!r}")
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, (tuple, list, torch.Size)) or not shape:
        raise ValueError(f"alloc {name!r}: shape must be a non-empty sequence of ints, got {shape!r}")
    if any(isinstance(e, bool) or not isinstance(e, int) or e <= 0 for e in shape):
        raise ValueError(f"alloc {name!r}: every extent of shape must be an int > 0, got {tuple(shape)!r}")
    return tuple(int(e) for e in shape), dtype


def multicast_gate(handle_multicast_ptr: int, env: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether this rank may use multicast, and why (pointer, torch's switch, the explicit opt-in)."""
    env = os.environ if env is None else env
    if not handle_multicast_ptr:
        return False, "symmetric memory reports no multicast address"
    if env.get(DISABLE_MULTICAST_ENV) == "1":
        return False, f"{DISABLE_MULTICAST_ENV}=1"
    if env.get(ALLOW_MULTICAST_ENV) != "1":
        return False, f"{ALLOW_MULTICAST_ENV} is not 1 (multicast is opt-in)"
    return True, "multicast allowed"


def placement_problem(places: Sequence[Mapping], backend: str, env: Mapping[str, str] | None = None) -> str | None:
    """Why ranks at ``places`` (``host``, ``device`` per rank) cannot share symmetric memory, or None."""
    env = os.environ if env is None else env
    shared: dict[tuple[str, str], list[int]] = {}
    for rank, place in enumerate(places):
        shared.setdefault((place["host"], place["device"]), []).append(rank)
    overlapping = [ranks for ranks in shared.values() if len(ranks) > 1]
    if not overlapping:
        return None
    if backend == "nccl":
        return f"ranks {overlapping[0]} share one GPU, which NCCL refuses; use a gloo group"
    if env.get(OVERLAPPING_DEVICES_ENV) != "1":
        return f"ranks {overlapping[0]} share one GPU; set {OVERLAPPING_DEVICES_ENV}=1 in every rank's environment"
    return None


def _first_disagreement(headers: Sequence[Mapping]) -> int | None:
    """The lowest rank whose header differs from rank 0's, or None when all agree."""
    for rank, header in enumerate(headers):
        if header != headers[0]:
            return rank
    return None


class PeerBuffer:
    """One collective buffer: this rank's tensor and every rank's address of it."""

    def __init__(
        self,
        request: AllocRequest,
        rank: int,
        local: torch.Tensor,
        peer_addresses: Sequence[int],
        multicast_ptr: int,
        remote: Callable[[int], torch.Tensor],
        keepalive: object = None,
    ) -> None:
        self.request = request
        self.rank = rank
        self.local = local
        self.peer_addresses = tuple(int(a) for a in peer_addresses)
        self.multicast_ptr = int(multicast_ptr)
        self._remote = remote
        self._remote_cache: dict[int, torch.Tensor] = {}
        # The symmetric-memory handle owns the peer mappings; it must outlive the addresses.
        self._keepalive = keepalive
        self.peer_ptrs = torch.tensor(self.peer_addresses, dtype=torch.int64, device=local.device)

    @property
    def name(self) -> str:
        """The name given to ``alloc``."""
        return self.request.name

    @property
    def nbytes(self) -> int:
        """Size of each rank's buffer in bytes."""
        return self.request.nbytes

    @property
    def address(self) -> int:
        """This rank's own base address."""
        return self.peer_addresses[self.rank]

    def peer_tensor(self, peer: int) -> torch.Tensor:
        """Rank ``peer``'s buffer as a tensor this rank can read and write."""
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < len(self.peer_addresses):
            raise ValueError(f"peer_tensor: peer must be an int in [0, {len(self.peer_addresses)}), got {peer!r}")
        if peer == self.rank:
            return self.local
        if peer not in self._remote_cache:
            self._remote_cache[peer] = self._remote(peer)
        return self._remote_cache[peer]

    def __repr__(self) -> str:
        return (
            f"PeerBuffer({self.name!r}, {self.request.dtype} {list(self.request.shape)}, rank {self.rank}, "
            f"peers {[hex(a) for a in self.peer_addresses]}, multicast {hex(self.multicast_ptr)})"
        )


@runtime_checkable
class Fabric(Protocol):
    """What a kernel host class may ask of its world's peer memory."""

    rank: int
    world: int
    device: torch.device

    def alloc(self, name: str, spec: int | tuple) -> PeerBuffer:
        """Collectively allocate one buffer on every rank (same order, same sizes)."""
        ...

    def barrier(self) -> None:
        """Finish this rank's device work, then meet every rank."""
        ...

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` stacked as ``[world, *shape]``."""
        ...


class _FabricBase:
    """The collective protocol shared by the providers; they supply the transport."""

    provider = "abstract"

    def __init__(self, rank: int, world: int, device: torch.device, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.rank = rank
        self.world = world
        self.device = torch.device(device)
        self.timeout_s = float(timeout_s)
        self._seq = 0
        self._alloc_count = 0
        self.buffers: list[PeerBuffer] = []

    # Transport, supplied by each provider.
    def _gather_headers(self, header: dict) -> list[dict]:
        """Every rank's header for the current collective, by rank."""
        raise NotImplementedError

    def _gather_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's tensor (CPU copy) stacked by rank."""
        raise NotImplementedError

    def _sync_device(self) -> None:
        """Wait until this rank's queued device work is complete."""
        raise NotImplementedError

    def _materialize(self, request: AllocRequest) -> PeerBuffer:
        """Allocate the agreed buffer on this rank and learn every rank's address."""
        raise NotImplementedError

    # The protocol.
    def _next_header(self, op: str, **fields) -> dict:
        """A header for this rank's next collective."""
        header = {"op": op, "seq": self._seq, **fields}
        self._seq += 1
        return header

    def _agree(self, header: dict) -> list[dict]:
        """Exchange ``header`` and raise ``FabricMismatch`` unless every rank sent the same one."""
        headers = self._gather_headers(header)
        other = _first_disagreement(headers)
        if other is not None:
            raise FabricMismatch(
                f"{self.provider} fabric: ranks disagree on a collective (seen on rank {self.rank}): "
                f"rank 0 called {describe_header(headers[0])}; rank {other} called "
                f"{describe_header(headers[other])}"
            )
        return headers

    def alloc(self, name: str, spec: int | tuple) -> PeerBuffer:
        """Collectively allocate a zero-filled buffer named ``name`` (``nbytes`` or ``(shape, dtype)``)."""
        shape, dtype = parse_alloc_spec(name, spec)
        request = AllocRequest(self._alloc_count, name, shape, dtype)
        self._agree(self._next_header(**request.header()))
        self._alloc_count += 1
        buffer = self._materialize(request)
        self.buffers.append(buffer)
        return buffer

    def barrier(self) -> None:
        """Finish this rank's device work, then meet every rank (deadline ``timeout_s``)."""
        self._sync_device()
        self._agree(self._next_header("barrier"))

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` stacked as ``[world, *shape]`` on ``tensor``'s device."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"all_gather: tensor must be a torch.Tensor, got {type(tensor).__name__}")
        self._agree(
            self._next_header(
                "all_gather", shape=list(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch.")
            )
        )
        return self._gather_tensor(tensor).to(tensor.device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world={self.world}, device={self.device})"


# --------------------------------------------------------------------------- virtual


class VirtualFabric(_FabricBase):
    """One rank of a world that lives in this process, on one device, one stream per rank."""

    provider = "virtual"

    def __init__(self, rendezvous: SlotRendezvous, rank: int, device: torch.device, timeout_s: float) -> None:
        super().__init__(rank, rendezvous.world, device, timeout_s)
        self._rendezvous = rendezvous
        self.stream = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None

    @classmethod
    def create(cls, world: int, device: torch.device | str, *, timeout_s: float = 60.0) -> list["VirtualFabric"]:
        """``world`` per-rank fabrics sharing one device and an in-process rendezvous."""
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValueError(f"VirtualFabric.create: world must be an int >= 1, got {world!r}")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        rendezvous = SlotRendezvous(world, timeout_s, timeout_error=CollectiveTimeout, name="virtual fabric")
        return [cls(rendezvous, rank, device, timeout_s) for rank in range(world)]

    @staticmethod
    def run(fabrics: Sequence["VirtualFabric"], fn: Callable[["VirtualFabric"], object]) -> list:
        """Run ``fn(fabric)`` for every rank in its own thread (on its stream); return results by rank.

        A rank's exception releases the others' waits and is re-raised here
        after every thread has ended; an original error wins over the
        timeouts it caused.
        """
        if not fabrics:
            raise ValueError("VirtualFabric.run: fabrics must be non-empty")
        rendezvous = fabrics[0]._rendezvous
        if [f.rank for f in fabrics] != list(range(rendezvous.world)):
            raise ValueError(f"VirtualFabric.run: fabrics: expected every rank of the world in rank order "
                             f"(VirtualFabric.create), got ranks {[f.rank for f in fabrics]}")

        def on_stream(rank: int) -> object:
            """``fn`` of rank ``rank``'s fabric, on its stream."""
            fabric = fabrics[rank]
            if fabric.stream is None:
                return fn(fabric)
            torch.cuda.set_device(fabric.device)
            with torch.cuda.stream(fabric.stream):
                return fn(fabric)

        return run_in_threads(rendezvous, on_stream)

    def _gather_headers(self, header: dict) -> list[dict]:
        """Every rank's header, met in-process (sized as the symmetric fabric sends it, so both refuse the same)."""
        what = describe_header(header)
        encode_header(header, HEADER_BYTES, f"fabric header {what}")
        return self._rendezvous.gather(self.rank, header["seq"], dict(header), what)

    def _gather_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's tensor, copied to host (which waits for the stream producing it) and stacked."""
        seq = self._seq
        self._seq += 1
        # A CUDA tensor comes back through pinned memory (kernels.hostcopy: a pageable copy can
        # wait behind a virtual peer's); a host one is cloned, since the ranks share the process.
        local = hostcopy.to_host(tensor.detach()) if tensor.is_cuda else tensor.detach().clone()
        values = self._rendezvous.gather(self.rank, seq, local, "all_gather payload")
        return torch.stack(values)

    def _sync_device(self) -> None:
        """Wait for this rank's stream and the calling thread's current stream."""
        if self.device.type == "cuda":
            self.stream.synchronize()
            torch.cuda.current_stream(self.device).synchronize()

    def _materialize(self, request: AllocRequest) -> PeerBuffer:
        """A plain zero-filled allocation per rank; addresses and tensors met in-process."""
        local = torch.zeros(request.shape, dtype=request.dtype, device=self.device)
        self._sync_device()
        seq = self._seq
        self._seq += 1
        tensors = self._rendezvous.gather(self.rank, seq, local, f"alloc #{request.index} addresses")
        return PeerBuffer(
            request,
            self.rank,
            local,
            [t.data_ptr() for t in tensors],
            0,
            lambda peer: tensors[peer],
            keepalive=tensors,
        )


# --------------------------------------------------------------------------- symmetric


class SymmetricFabric(_FabricBase):
    """One rank per process; buffers from torch symmetric memory, collectives over ``group``."""

    provider = "symmetric"

    def __init__(self, group=None, *, device: torch.device | str | None = None, timeout_s: float = 120.0) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("SymmetricFabric: torch.distributed must be initialized (group)")
        self.group = group if group is not None else dist.group.WORLD
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        super().__init__(dist.get_rank(self.group), dist.get_world_size(self.group), device, timeout_s)
        self.backend = str(dist.get_backend(self.group))
        self._exchange_device = self.device if self.backend == "nccl" else torch.device("cpu")
        self._check_placement()

    def _check_placement(self) -> None:
        """Collectively check the backend agrees and ranks sharing a GPU have what they need."""
        hello = self._next_header("init", backend=self.backend)
        self._agree(hello)
        places = self._gather_headers(
            {"op": "init-place", "seq": self._seq, "host": socket.gethostname(), "device": str(self.device)}
        )
        self._seq += 1
        if self.device.type != "cuda":
            return
        problem = placement_problem(places, self.backend)
        if problem is not None:
            raise ValueError(f"SymmetricFabric: {problem}")

    def _group_gather(self, tensor: torch.Tensor, what: str) -> torch.Tensor:
        """All-gather ``tensor`` over the group within the deadline; return the CPU stack by rank."""
        import torch.distributed as dist

        local = tensor.to(self._exchange_device).contiguous()
        out = [torch.empty_like(local) for _ in range(self.world)]
        try:
            work = dist.all_gather(out, local, group=self.group, async_op=True)
            work.wait(timeout=timedelta(seconds=self.timeout_s))
        except Exception as exc:  # noqa: BLE001 - re-raised with the collective named
            raise CollectiveTimeout(
                f"symmetric fabric rank {self.rank}: {what} did not complete within {self.timeout_s:.1f} s "
                f"(a rank is missing or died): {exc}"
            ) from exc
        return torch.stack([o.to("cpu") for o in out])

    def _gather_headers(self, header: dict) -> list[dict]:
        """Every rank's header, exchanged over the group as fixed-size JSON."""
        what = describe_header(header)
        stacked = self._group_gather(encode_header(header, HEADER_BYTES, f"fabric header {what}"), what)
        return [decode_header(row) for row in stacked]

    def _gather_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's tensor over the group, stacked on the host."""
        self._seq += 1
        return self._group_gather(tensor.detach(), "all_gather payload")

    def _sync_device(self) -> None:
        """Wait until this rank's device work (every stream) is complete."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _materialize(self, request: AllocRequest) -> PeerBuffer:
        """``symm_mem.empty`` + ``rendezvous``, zero-fill, then agree on multicast."""
        if self.device.type != "cuda":
            raise ValueError(f"SymmetricFabric.alloc {request.name!r}: device must be CUDA, got {self.device}")
        from torch.distributed import _symmetric_memory as symm_mem

        local = symm_mem.empty(request.shape, dtype=request.dtype, device=self.device)
        handle = symm_mem.rendezvous(local, self.group)
        local.zero_()
        addresses = [
            local.data_ptr() if peer == self.rank else handle.get_remote_tensor(peer, request.shape, request.dtype).data_ptr()
            for peer in range(self.world)
        ]
        allowed, reason = multicast_gate(int(getattr(handle, "multicast_ptr", 0) or 0))
        self._sync_device()
        # Gathering every rank's verdict is also the barrier that makes the zeros visible.
        verdicts = self._gather_headers(
            {"op": "alloc-multicast", "seq": self._seq, "index": request.index, "allowed": allowed, "reason": reason}
        )
        self._seq += 1
        multicast_ptr = int(handle.multicast_ptr) if all(v["allowed"] for v in verdicts) else 0
        return PeerBuffer(
            request,
            self.rank,
            local,
            addresses,
            multicast_ptr,
            lambda peer: handle.get_remote_tensor(peer, request.shape, request.dtype),
            keepalive=handle,
        )


def fabric_of(group=None, device: torch.device | str | None = None):
    """The fabric a kernel's constructor builds on: ``group`` itself when it is a fabric provider, else a
    ``SymmetricFabric`` over the ``torch.distributed`` group ``group`` (None: the default group) on ``device``."""
    if all(hasattr(group, attr) for attr in ("rank", "world", "device", "alloc", "barrier", "all_gather")):
        if device is not None and torch.device(device) != torch.device(group.device):
            raise ValueError(f"device: {device} differs from the fabric's device {group.device}")
        return group
    return SymmetricFabric(group, device=device)


__all__: Sequence[str] = (
    "ALLOW_MULTICAST_ENV",
    "AllocRequest",
    "CollectiveTimeout",
    "Fabric",
    "FabricError",
    "FabricMismatch",
    "HeaderTooLong",
    "PeerBuffer",
    "SymmetricFabric",
    "VirtualFabric",
    "describe_header",
    "fabric_of",
    "multicast_gate",
    "parse_alloc_spec",
    "placement_problem",
)
