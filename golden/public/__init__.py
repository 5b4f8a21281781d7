"""Golden stand-ins of the kernels' public classes: the same constructors and methods, computed on the CPU.

A serving engine holds ``kernels.allreduce_mhc.AllReduceMHC``,
``kernels.markov_sharded.host.ShardedMarkovSampler`` and
``kernels.markov_fused.host.MarkovKernels``; where no GPU exists (CPU tests, the
offline replay of a recording) the classes of the same names here take
their place: the kernel class's constructor keywords and method signatures
(names, defaults, return values, in-place writes into the caller's
buffers, a ``ValueError`` / ``TypeError`` naming a bad argument before
anything changes), the same bits, computed by the golden family systems
and functions (``golden.allreduce_mhc``, ``golden.markov_sharded``,
``golden.markov_fused`` and what they build on), over ``group=`` a
``golden.comm.Comm`` (``ThreadWorld`` ranks, or the harness's gloo comm
under torchrun; None: world 1). One module per family says what is and is
not modelled; none models deadlines, grids, memory layout or CUDA graphs.

Two conventions shared with the kernel classes (docs/interfaces.md):

- ``public_args``: the constructor's arguments by name as passed (tensors
  by reference), without ``group``, ``device``, ``diag`` and
  ``flight_dir``, so ``cls(**obj.public_args, group=comm)`` rebuilds an
  equal object here from a kernel instance (golden-only keywords such as
  ``arch`` keep their defaults).
- ``flight_launches``: the instance's kernel launches so far, numbered as
  its flight recorder numbers them (``kernels.flight``, record word 0: 0
  for the first launch). ``STAND_INS`` maps each kernel class (by module and
  name) to its stand-in.

Each stand-in class also says which of the caller's buffers its methods
write in place (``WRITES``: method -> argument names, compared bit for bit)
and which the kernel writes with values not modelled here (``SCRATCH``: the
fused step's per-CTA partial results), for a recorder that compares a
replay's buffers with a recording's.
"""

from golden.public.allreduce import AllReduceMHC
from golden.public.markov_fused import MarkovKernels
from golden.public.markov_sharded import ShardedMarkovSampler

STAND_INS = {
    "kernels.allreduce_mhc.host.AllReduceMHC": AllReduceMHC,
    "kernels.markov_sharded.host.ShardedMarkovSampler": ShardedMarkovSampler,
    "kernels.markov_fused.host.MarkovKernels": MarkovKernels,
}

__all__ = ["AllReduceMHC", "MarkovKernels", "STAND_INS", "ShardedMarkovSampler"]
