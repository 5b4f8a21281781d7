"""rankcheck: the user-facing names of the harness (the implementation lives in ``harness/``).

``rankcheck.recording(target, directory)`` records every rank of your own job
(``harness.recording.writer``). Change one line per rank and call what it
yields::

    with rankcheck.recording(sampler, "/shared/rec") as sampler:
        ...  # the decode loop, unchanged

``target`` is a public kernel object (``AllReduceMHC``,
``ShardedMarkovSampler``, ``MarkovKernels`` or its golden stand-in from
``golden.public``), a mapping ``{name: object}`` of several (yielding a
mapping of recorded objects), or a family system with ``family=``,
``config=`` and ``static=``. Each object's constructor arguments are
recorded once, each call as made (arguments by name before it, returned
tensors, buffers written in place and counters after it; a call under
CUDA-graph capture marked, not copied), bounded by ``max_calls`` and
``max_bytes``, written through as calls happen and on exit, on an exception,
on SIGTERM/SIGINT and up to the last call on a kill: one bundle per rank plus
a world manifest (docs/interfaces.md, "Recorded worlds"). Then
``python -m harness replay --bundle DIR`` (``--impl golden`` on a CPU,
``--impl kernel`` on a GPU) rebuilds every rank's objects, replays the calls
bit for bit and names the first rank, call, object and flight launch where
the ranks diverged.

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
