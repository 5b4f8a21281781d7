"""rankcheck: the user-facing names of the harness (the implementation lives in ``harness/``).

``rankcheck.recording(system, directory, family=..., config=..., static=...)``
records every rank of your own torchrun job (``harness.recording.writer``): one
bundle per rank plus a world manifest, bounded, written on exit, on an
exception and on SIGTERM/SIGINT; ``python -m harness replay --bundle DIR``
replays it offline.

``rankcheck.flight_findings(directory)`` reads the kernels' flight
recorders (``kernels.flight``: every instance of ``AllReduceMHC``,
``ShardedMarkovSampler`` and ``MarkovKernels`` keeps a ring of its last
launches in a file, written by its kernels, CUDA-graph replays included)
that every rank left under ``directory`` (the instances' ``flight_dir``,
``$RANKCHECK_FLIGHT_DIR``, or by default ``kernels.flight.default_directory()``,
one per torchrun job), and names per instance the first launch where
the ranks' records differ or one rank stopped: ``(findings, problems)``;
``rankcheck flight DIR`` prints the same from the command line.

``rankcheck.golden_comm(group=None)`` is a ``golden.comm.Comm`` over a
``torch.distributed`` process group (default: the world; gloo on the CPU),
the ``group=`` the golden stand-ins of the public classes
(``golden.public``) take in a torchrun job: the same program then runs
on the CPU (``examples/decode_loop.py --impl golden``). Ranks that call one
exchange with different shapes get an error naming both, not a hang.
"""

from harness.rank.dist_comm import DistComm as golden_comm
from harness.recording.writer import recording
from kernels.flight import directory_findings as flight_findings

__all__ = ["flight_findings", "golden_comm", "recording"]
