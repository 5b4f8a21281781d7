"""Every deadline's default, in one place: the kernels' serving deadline, the harness's and the bench's kernel deadlines, and the harness's wall-clock allowances with how the machine's load scales them.

Two kinds of deadline meet in a validation run. A *kernel* deadline bounds
one wait inside a kernel (a mailbox or Lamport wait for a peer): past it the
kernel writes its ``kernels.diag`` record and traps. A *wall-clock* deadline
bounds what the harness waits for a rank from outside (startup, each launch,
each case) before it ends the job and calls the case a TIMEOUT.

Kernel deadlines. The public classes (``AllReduceMHC(timeout_ms=)``,
``MarkovKernels(timeout_ns=)``, ``ShardedMarkovSampler(timeout_ns=)``, the
exchange's ``PeerGather``) and their golden stand-ins default to
``SERVING_DEADLINE_NS``, ten minutes (``SERVING_DEADLINE_MS`` in the
all-reduce's milliseconds): a serving engine's peer may stall for seconds
and must not lose its CUDA context to a trap for that, while a peer gone
for good still ends in a record naming it (``kernels.diag``: deadline
policy). The harness passes its own, short ones explicitly so that its hang
and timeout scenarios end in seconds: ``ALLREDUCE_MHC_HARNESS_TIMEOUT_MS``,
``MARKOV_FUSED_HARNESS_TIMEOUT_NS``, and the sharded sampler's config default
``MARKOV_SHARDED_CONFIG_TIMEOUT_NS`` (generous: virtual ranks drift apart
while one computes a golden reference; a scenario with a deadline passes a
shorter one). The bench passes ``BENCH_TIMEOUT_NS`` (``BENCH_TIMEOUT_MS``),
so a lost peer traps with its record in two seconds instead of stalling a
benchmark. A deadline of 0 means none. These are used as given: the load
does not scale them.

Wall-clock deadlines. ``validate``'s startup allowance (``STARTUP_S``), the
per-case allowance (``CASE_ALLOWANCE_S``) and the per-launch deadline
(``DEFAULT_PER_LAUNCH_S``) are wall time, and a process that gets a tenth
of a core needs ten times as long; ``scaled_defaults`` multiplies each
default by the load factor (the load per core when the run starts, between
1 and ``MAX_LOAD_FACTOR``: ``harness.launch.load_scale`` measures it and
says so in the report header), and uses a value given on the command line
as given.

Why here. ``kernels/`` may not import ``golden/`` or ``harness/``, and
``golden/`` neither ``kernels/`` nor ``harness/``; ``contracts/`` is the leaf
every package may import, so the serving default that both a kernel and its
stand-in take, the harness's per-family kernel deadlines (one of them the
default of the sharded sampler's own config check) and the
wall-clock allowances sit side by side on one page, and the modules that
used to hold copies import them from here.

The agent's shutdown. On several nodes, once every node has said it is
done with a job and none of their agents missed torchrun's exit barrier,
each agent passes the barrier and shuts its rendezvous down by itself; a
node gives its agent ``AGENT_SHUTDOWN_S`` for that from when its workers
have all exited (``harness.launch.jobs``), not a grace period: a SIGTERM in
the middle of that shutdown is what left a traceback in a healthy node's
log (issue 40). Past it the agent is ended and the job says "stuck agent
shutdown". Like the kernel deadlines, the load does not scale it: it is a
backstop, not a wait anything is ordered by.
"""

from __future__ import annotations

# The public classes' default wait deadline: ten minutes, torch.distributed's default NCCL collective timeout, so an
# engine whose peer stalls that long has its own collectives time out as well.
SERVING_DEADLINE_NS = 600 * 1_000_000_000
SERVING_DEADLINE_MS = SERVING_DEADLINE_NS / 1e6

# The harness's kernel deadlines, passed explicitly (the hang and timeout scenarios end in a diag record within them).
ALLREDUCE_MHC_HARNESS_TIMEOUT_MS = 5_000.0
MARKOV_FUSED_HARNESS_TIMEOUT_NS = 10_000_000_000
MARKOV_SHARDED_CONFIG_TIMEOUT_NS = 60_000_000_000

# The bench's kernel deadline: a lost peer traps (with its diagnostic record) after 2 s.
BENCH_TIMEOUT_NS = 2_000_000_000
BENCH_TIMEOUT_MS = BENCH_TIMEOUT_NS / 1e6

# The harness's wall-clock allowances on a quiet machine, in seconds, and the most the load may stretch them.
DEFAULT_PER_LAUNCH_S = 30.0
STARTUP_S = 90.0
CASE_ALLOWANCE_S = 20.0
MAX_LOAD_FACTOR = 10.0

# How long a node waits for a torchrun agent whose workers have all exited (every node done, none missed the exit
# barrier) to finish its rendezvous shutdown by itself before ending it as a stuck agent shutdown.
AGENT_SHUTDOWN_S = 60.0


def scaled_defaults(factor: float, *, startup_s: float | None, per_launch_s: float | None) -> dict:
    """The job settings' startup allowance, case allowance and per-launch deadline: each given value as it is, each
    default times ``factor``."""
    return {"startup_s": startup_s if startup_s is not None else STARTUP_S * factor,
            "case_allowance_s": CASE_ALLOWANCE_S * factor,
            "per_launch_s": per_launch_s if per_launch_s is not None else DEFAULT_PER_LAUNCH_S * factor}


__all__ = ["AGENT_SHUTDOWN_S", "ALLREDUCE_MHC_HARNESS_TIMEOUT_MS", "BENCH_TIMEOUT_MS", "BENCH_TIMEOUT_NS", "CASE_ALLOWANCE_S",
           "DEFAULT_PER_LAUNCH_S", "MARKOV_FUSED_HARNESS_TIMEOUT_NS", "MARKOV_SHARDED_CONFIG_TIMEOUT_NS",
           "MAX_LOAD_FACTOR", "SERVING_DEADLINE_MS", "SERVING_DEADLINE_NS", "STARTUP_S", "scaled_defaults"]
