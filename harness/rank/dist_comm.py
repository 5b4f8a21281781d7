"""``golden.comm.Comm`` over torch.distributed: the golden per-rank loop across real processes.

``DistComm(group)`` gives a golden system the one collective it needs,
``all_gather(t) -> [world, *t.shape]`` with group rank k's tensor at index k,
over a torch.distributed group (gloo on CPU, NCCL on GPUs). Every gather is
preceded by a gather of a fixed-size description (dtype code, rank count,
shape), so ranks that disagree on a shape or dtype (an injected
``rank_disagree``) get a ``ValueError`` naming both ranks instead of a
corrupted exchange or a hang; this matches ``golden.comm.ThreadWorld``.
Deadlines come from the process group's timeout (set by the worker) and,
above it, from the harness watchdog.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from golden.comm import CollectiveMismatch

_MAX_DIMS = 8
_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
           torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint16, torch.uint32, torch.uint64]


def _describe(tensor: torch.Tensor) -> torch.Tensor:
    """Encode dtype, ndim and shape of ``tensor`` as a fixed-size int64 vector."""
    if tensor.dim() > _MAX_DIMS:
        raise ValueError(f"all_gather supports at most {_MAX_DIMS} dims, got {tensor.dim()}")
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"all_gather: unsupported dtype {tensor.dtype}")
    desc = torch.full((2 + _MAX_DIMS,), -1, dtype=torch.int64)
    desc[0] = _DTYPES.index(tensor.dtype)
    desc[1] = tensor.dim()
    desc[2:2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    return desc


def _decode(desc: torch.Tensor) -> str:
    """The dtype and shape a description vector encodes, as text."""
    dims = int(desc[1])
    return f"{tuple(int(d) for d in desc[2:2 + dims])} {str(_DTYPES[int(desc[0])]).replace('torch.', '')}"


class DistComm:
    """One rank's ``Comm`` over a torch.distributed process group (default: the world)."""

    def __init__(self, group: dist.ProcessGroup | None = None, *, device: torch.device | str = "cpu") -> None:
        if not dist.is_initialized():
            raise RuntimeError("DistComm needs torch.distributed initialised (run under torchrun)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.device = torch.device(device)
        self._seq = 0

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Return every group rank's ``tensor`` stacked as ``[world, *shape]`` (on the tensor's device)."""
        seq = self._seq
        self._seq += 1
        desc = _describe(tensor).to(self.device)
        descs = [torch.empty_like(desc) for _ in range(self.world)]
        dist.all_gather(descs, desc, group=self.group)
        for other, d in enumerate(descs):
            if not torch.equal(d, descs[0]):
                raise CollectiveMismatch(
                    f"all_gather #{seq}: rank 0 gave {_decode(descs[0].cpu())}, rank {other} gave {_decode(d.cpu())}"
                )
        src = tensor.detach().contiguous().to(self.device)
        # every backend moves bytes; gloo lacks some dtypes (int16, unsigned), so the wire is uint8
        wire = src.reshape(-1).view(torch.uint8)
        parts = [torch.empty_like(wire) for _ in range(self.world)]
        dist.all_gather(parts, wire, group=self.group)
        stacked = torch.stack(parts).view(src.dtype).reshape(self.world, *src.shape)
        return stacked.to(tensor.device)
