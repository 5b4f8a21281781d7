"""The process group the examples join: torchrun's world, or a world of one for a plain ``python examples/X.py``.

Every example runs its ranks as processes joined by gloo (the kernels'
exchange goes through symmetric memory, not through the process group), on
the GPU ``LOCAL_RANK`` picks when the kernels run, on the CPU when the golden
stand-ins do. Importing it first sets, unless the environment does, what
must hold before torch.distributed or symmetric memory are touched: NVLink
multicast off, and ranks of one GPU allowed to map each other's buffers.
``world_group`` is the ``group=`` the public objects are built over, ``public_class``
their classes by name.
"""

from __future__ import annotations

import os
from datetime import timedelta

for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1"), ("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1")):
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def join_world(on_gpu: bool, timeout_s: float, solo_port: int) -> tuple[torch.device, int, int]:
    """Pick this rank's device, join the gloo process group (alone on ``solo_port`` outside torchrun) with
    ``timeout_s`` on its collectives, and return the device, the rank and the world size."""
    device = torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(solo_port))
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
    return device, dist.get_rank(), dist.get_world_size()


def world_group(impl: str, device: torch.device):
    """The ``group=`` of the public objects of ``impl``: a ``SymmetricFabric`` over the world's process group
    (``kernel``: peer buffers from torch symmetric memory) or ``rankcheck.golden_comm()`` (``golden``: gloo)."""
    if impl == "kernel":
        from kernels.fabric import SymmetricFabric

        return SymmetricFabric(dist.group.WORLD, device=device)
    import rankcheck

    return rankcheck.golden_comm()


def public_class(name: str, impl: str) -> type:
    """The public class ``name`` of ``impl``: the kernel class (``kernels/``) or its golden stand-in (``golden.public``)."""
    from harness.recording.targets import public_type  # each public class's module, by the class's name

    return public_type(name, impl)
