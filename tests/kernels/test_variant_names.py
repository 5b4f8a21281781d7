"""Every kernel variant gets a symbol of its own (kernels/variant.py).

CuTe DSL mangles ``str(kernel)`` into the kernel's symbol; before
``KernelVariant`` the 197 variants of the compile gate had 51 distinct
symbols, and two same-named variants loaded in one process can run each
other's code. This test builds the Markov families' kernel objects (no
compile) over the configurations they compile and requires distinct
identifiers; tests/kernels/test_allreduce.py checks the all-reduce's symbols.
"""

import itertools
import re

from kernels.markov_fused.host import BLOCK_SIZES, AnchorKernel, CacheFillKernel, PickKernel, StepKernel, vector_bytes
from kernels.markov_common.probe import OPS, ProbeKernel
from kernels.markov_sharded.kernel import ShardedMarkovSample
from kernels.markov_sharded.probe import MmaChainProbe
from kernels.variant import KernelVariant


def _fused_kernels():
    """One object per fused-loop configuration the compile gate covers, plus the other fused classes."""
    yield AnchorKernel(row_bytes=512, chunk=4, w1_rows=4096)
    yield AnchorKernel(row_bytes=512, chunk=16, w1_rows=4096)
    for block, blocks, has_cap, sharded, pdl in itertools.product(
        BLOCK_SIZES, (8, 160), (False, True), (False, True), (False, True)
    ):
        for vector in (False, True) if vector_bytes(block) else (False,):
            yield StepKernel(block=block, blocks=blocks, vector=vector, has_cap=has_cap, sharded=sharded, pdl=pdl,
                             row_bytes=512, chunk=16, w1_rows=4096)
    for tp, pdl in itertools.product((1, 2, 4, 8, 16, 32), (False, True)):
        yield PickKernel(tp=tp, pdl=pdl, row_bytes=512, chunk=16, w1_rows=4096)
    yield CacheFillKernel(vector=False)
    yield CacheFillKernel(vector=True)


def _markov_kernels():
    """Every kernel object of the Markov families and their probes."""
    yield from _fused_kernels()
    for steps, base, cache, coop in itertools.product(range(1, 9), ("bfloat16", "float32"), ("bfloat16", "float32"),
                                                      (True, False)):
        yield ShardedMarkovSample(steps, base, cache, coop)
    yield MmaChainProbe()
    for op in OPS:
        yield ProbeKernel(op)


def test_every_markov_kernel_object_has_its_own_identifier():
    kernels = list(_markov_kernels())
    names = [str(kernel) for kernel in kernels]
    assert all(isinstance(kernel, KernelVariant) for kernel in kernels)
    assert len(set(names)) == len(names)
    assert all("object at" not in name and re.fullmatch(r"[A-Za-z0-9_]+", name) for name in names)

