"""Child process of the timeout test: rank 1 of two virtual ranks skips a call.

Rank 0's consumer polls for rank 1's fragment, passes its deadline, commits
the diagnostic record and traps; the CUDA context is then dead, so this runs
in its own process. It writes ``{"launch_failed", "report"}`` as JSON to
``argv[1]`` and exits.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from allreduce_cases import make_call, make_config, make_static, to_device  # noqa: E402
from harness.families.allreduce_mhc.kernel import AllReduceMHCSystem  # noqa: E402
from trap_child import dump_rank0_and_exit, launch_failed, report_json  # noqa: E402


def main(path: str) -> None:
    """Run the skipped call and dump what rank 0's record says."""
    config = make_config(1024, 2)
    static = make_static(config, 1)
    call = make_call(config, 2, 2)
    device = torch.device("cuda", torch.cuda.current_device())

    def body(fabric):
        """One rank: rank 1 builds the system and skips the call; rank 0 launches and reads its record."""
        system = AllReduceMHCSystem(fabric, to_device(static, device), config, timeout_ms=300)
        if fabric.rank == 1:
            return None  # skips the call
        system.launch(to_device(call, device), {})
        return {"launch_failed": launch_failed(), "report": report_json(system.diag_record)}

    dump_rank0_and_exit(path, body, device)


if __name__ == "__main__":
    main(sys.argv[1])
