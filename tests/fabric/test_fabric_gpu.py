"""GPU tests of the fabric providers: data written through peer memory arrives
at the right rank. VirtualFabric at world 8 in one process; SymmetricFabric
with real torchrun ranks sharing one GPU (gloo + overlapping devices)."""

from __future__ import annotations

import pytest
import torch

from fabric_launch import run_symmetric_worker
from kernels.fabric import OVERLAPPING_DEVICES_ENV, VirtualFabric

pytestmark = pytest.mark.gpu


def _pattern(source: int, numel: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The values rank ``source`` writes into its successor."""
    return ((torch.arange(numel, device=device) * 7 + source * 1000 + 3) % 251).to(dtype)


@pytest.mark.parametrize("world", [2, 8])
def test_virtual_fabric_ring_on_gpu(world):
    device = torch.device("cuda", torch.cuda.current_device())

    def body(fabric):
        outcome = {}
        for name, spec in [("bytes", 4096), ("typed", ((3, 257), torch.float32))]:
            buf = fabric.alloc(name, spec)
            table = buf.peer_ptrs.cpu().tolist()
            numel = buf.local.numel()
            buf.peer_tensor((fabric.rank + 1) % fabric.world).view(-1).copy_(
                _pattern(fabric.rank, numel, buf.local.dtype, device)
            )
            fabric.barrier()
            expected = _pattern((fabric.rank - 1) % fabric.world, numel, buf.local.dtype, device)
            outcome[name] = (
                bool(torch.equal(buf.local.view(-1), expected)),
                table == list(buf.peer_addresses) and table[fabric.rank] == buf.local.data_ptr(),
                buf.multicast_ptr,
            )
            fabric.barrier()
        return outcome

    fabrics = VirtualFabric.create(world, device, timeout_s=60)
    assert len({f.stream.cuda_stream for f in fabrics}) == world, "one stream per rank"
    for rank, outcome in enumerate(VirtualFabric.run(fabrics, body)):
        for name, (received, table_ok, multicast) in outcome.items():
            assert received, f"rank {rank} buffer {name}: wrong data from rank {(rank - 1) % world}"
            assert table_ok, f"rank {rank} buffer {name}: peer table disagrees with the addresses"
            assert multicast == 0


@pytest.mark.parametrize("nproc", [2, 4])
def test_symmetric_fabric_ring_torchrun_one_gpu(tmp_path, nproc):
    reports = run_symmetric_worker(
        "ring", nproc, str(tmp_path), timeout_s=240, env={OVERLAPPING_DEVICES_ENV: "1"}
    )
    for report in reports:
        for name, check in report["checks"].items():
            assert check["received_ok"], f"rank {report['rank']} {name}: wrong data from its predecessor"
            assert check["table_ok"], f"rank {report['rank']} {name}: peer table wrong"
            assert check["distinct_addresses"], f"rank {report['rank']} {name}: peers share an address"
            assert check["multicast_ptr"] == 0, "multicast must stay off on the lent machines"
