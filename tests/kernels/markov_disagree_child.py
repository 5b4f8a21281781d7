"""Child process of the disagreement tests: two virtual ranks of the public ``MarkovKernels`` that call its
exchange (``gather_packets``) differently, eagerly or through a captured graph, under a 2 s deadline.

Cases (``argv[2]``): ``never``, rank 1 builds its loop and never gathers; ``sizes``, rank 0 gathers 4 rows and
rank 1 2 rows; ``skip``, rank 0 gathers three times and rank 1 twice. Mode (``argv[1]``): ``eager`` calls
``gather_packets`` directly; ``graph`` captures one call per rank (its own size) and replays it as often as the
case calls. The exchange's own check ends every case in a trap (a timeout or a call mismatch), which ends the
CUDA context, so each case runs in a process of its own. Writes ``{"failed": [per rank], "reports": [per rank's
decoded record or None]}`` as JSON to ``argv[3]`` and exits.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading

import torch

from kernels.fabric import VirtualFabric
from kernels.markov_fused.host import MarkovKernels
from trap_child import launch_failed, write_result

TIMEOUT_NS = 2_000_000_000
VOCAB, DIM, TP = 256, 64, 2
# Per case: the rows each rank's packets have, and how many calls (or replays) each rank makes.
CASES = {
    "never": {"rows": (4, 4), "calls": (1, 0)},
    "sizes": {"rows": (4, 2), "calls": (1, 1)},
    "skip": {"rows": (4, 4), "calls": (3, 2)},
}
# Every rank's loop stays alive until the process exits: a peer may still be writing into a buffer it owns.
_KEPT: list = []
# Each rank's result, written out by the last rank to finish from its own thread, so nothing after the ranks'
# bodies (thread exit, joins, interpreter teardown over the trapped context) stands between them and the result:
# under the whole GPU suite the eager ``never`` child printed rank 0's record and then wrote nothing for 300 s.
_RESULTS: dict = {}
_LOCK = threading.Lock()
# Where a held child's threads are, written to stderr without the GIL (the runner's SIGUSR1 was seen ignored).
WATCHDOG_S = 45


def main(mode: str, case: str, path: str) -> None:
    """Run ``case`` in ``mode`` on two virtual ranks; write what each rank's launch and record said."""
    device = torch.device("cuda", torch.cuda.current_device())
    w1 = (torch.arange(VOCAB * DIM, device=device) % 7).to(torch.bfloat16).view(VOCAB, DIM)
    spec = CASES[case]

    def body(fabric):
        """Build the public loop collectively, make this rank's calls, report whether its stream failed."""
        embeds = torch.zeros(4, DIM, dtype=torch.bfloat16, device=device)
        loop = MarkovKernels(w1, embeds, width=VOCAB // TP, has_cap=False, tp=TP, steps=[], pick_pdl=False,
                             fill_vector=False, group=fabric, max_rows=4, max_steps=2, timeout_ns=TIMEOUT_NS)
        _KEPT.append(loop)
        packets = torch.full((spec["rows"][fabric.rank], 4), fabric.rank, dtype=torch.int32, device=device)
        calls = spec["calls"][fabric.rank]
        failed = False
        try:
            if mode == "eager":
                for step in range(calls):
                    loop.gather_packets(packets, step)
            else:
                graph = torch.cuda.CUDAGraph()
                fabric.barrier()
                graph.capture_begin(capture_error_mode="thread_local")
                loop.gather_packets(packets, 0)
                graph.capture_end()
                _KEPT.append(graph)
                fabric.barrier()
                for _ in range(calls):
                    graph.replay()
        except RuntimeError:  # a launch after a peer's trap ended the shared context
            failed = True
        failed = failed or launch_failed()
        report = loop.diag_record.read()
        deposit(fabric.rank, {"failed": failed, "report": None if report is None else {**report.to_json(),
                                                                                      "describe": report.describe()}})

    def deposit(rank: int, result: dict) -> None:
        """Keep ``rank``'s result; the last rank to finish writes them all and ends the process at once."""
        with _LOCK:
            _RESULTS[rank] = result
            if len(_RESULTS) < TP:
                return
            write_result(path, {"failed": [_RESULTS[r]["failed"] for r in range(TP)],
                                "reports": [_RESULTS[r]["report"] for r in range(TP)]})
            sys.stdout.flush()
            os._exit(0)

    VirtualFabric.run(VirtualFabric.create(TP, device, timeout_s=120), body)
    raise SystemExit("markov_disagree_child: every rank returned without depositing its result")


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks a hung child where its threads are
    faulthandler.dump_traceback_later(WATCHDOG_S, repeat=True)
    main(*sys.argv[1:4])
