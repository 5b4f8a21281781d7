"""Child process of the stale-tag test: two virtual ranks build a ``PeerGather``; rank 1 never launches.

Before rank 0's first gather (launch 0: tag ``tag_of(0)``, parity 0) its own buffer gets, in rank 1's slot and
flag of parity 0, a payload of 0x55 bytes and the tag of launch -2 (what a launch two back would have left
there). Rank 0 must keep waiting: with a 200 ms deadline it commits the diagnostic record and traps, which
ends the CUDA context, so this runs in its own process. Writes ``{"launch_failed", "report", "out_is_stale"}``
as JSON to ``argv[1]`` and exits.
"""

from __future__ import annotations

import sys

import torch

from kernels.diag import DiagRecord
from kernels.markov_fused.exchange import PeerGather
from kernels.markov_fused.exchange_layout import flag_offset, slot_offset, tag_of
from trap_child import dump_rank0_and_exit, launch_failed, report_json

PAYLOAD = torch.arange(8, dtype=torch.int32).view(2, 4)


def main(path: str) -> None:
    """Plant the stale slot, launch rank 0's gather alone, report what its record says."""
    device = torch.device("cuda", torch.cuda.current_device())

    def body(fabric):
        """Rank 1 builds its half and returns; rank 0 plants the stale values and gathers."""
        gather = PeerGather(fabric, "stale.test", PAYLOAD.numel() * 4, timeout_ns=200_000_000, diag=DiagRecord())
        fabric.barrier()
        if fabric.rank == 1:
            return None
        own = gather.peer.local
        slot = slot_offset(0, 1, fabric.world, gather.slot_bytes)
        own[slot: slot + PAYLOAD.numel() * 4].fill_(0x55)
        flag = flag_offset(0, 1, 0)
        own[flag: flag + 4].view(torch.int32).fill_(tag_of((0 - 2) & 0xFFFFFFFF))
        source = PAYLOAD.to(device)
        torch.cuda.current_stream().synchronize()
        out = gather.gather(source)
        failed = launch_failed()
        stale = None if failed else bool((out[1].view(torch.uint8) == 0x55).all())
        return {"launch_failed": failed, "out_is_stale": stale, "report": report_json(gather.diag_record)}

    dump_rank0_and_exit(path, body, device)


if __name__ == "__main__":
    main(sys.argv[1])
