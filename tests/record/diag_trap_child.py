"""Child process of the diag GPU test: a kernel times out, writes its record, traps.

Usage: ``python tests/record/diag_trap_child.py DUMP_JSON``. Exits 3 when the
launch failed as expected (the record is dumped to DUMP_JSON), 0 if the kernel
unexpectedly completed, anything else on an unexpected error. The CUDA context
is dead after the trap, so nothing here touches CUDA once the failure is seen.
"""

from __future__ import annotations

import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

import cuda.bindings.driver as cuda  # noqa: E402
import torch  # noqa: E402
from cutlass import Int32, Int64, Uint32  # noqa: E402

from diag_probe import DiagTrapProbe, compile_probe  # noqa: E402
from kernels.diag import DiagRecord  # noqa: E402

RANK, LAUNCH, STEP, AWAITED, EXPECTED, TIMEOUT_NS = 5, 7, 2, 3, 0x1234, 50_000_000


def main(dump_path: str) -> int:
    """Launch the probe against a flag nobody sets; dump the record after the trap."""
    record = DiagRecord()
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    compiled = compile_probe(DiagTrapProbe(writer_block=1, writer_thread=33))
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    try:
        compiled(
            Int64(record.address), Int64(flag.data_ptr()), Int32(RANK), Int32(LAUNCH), Int32(STEP),
            Int32(AWAITED), Uint32(EXPECTED), Int64(TIMEOUT_NS), stream,
        )
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the expected launch failure
        print(f"launch failed as expected: {exc}", flush=True)
        record.dump(dump_path, error=str(exc))
        # The device printf sits in libc's stdout buffer; os._exit would drop it.
        ctypes.CDLL(None).fflush(None)
        os._exit(3)  # skip CUDA teardown on a dead context
    record.dump(dump_path, error=None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
