"""The fused Markov loop's and its head GEMV's compile groups, timed by ``python -m harness.bench.compile_profile``.

``COMPILE_GROUPS["fused"]`` is the sharded ``MarkovKernels`` at tp 2,
``["head"]`` the ``HeadGemv`` the bench pairs with it (the profile's
smallest group). Their imports stay inside the functions: the profiler
times them.
"""


def fused_variants(arch: str) -> dict:
    """The variants a sharded ``MarkovKernels`` at tp 2 compiles (row 512 bytes, 8 blocks): name -> thunk."""
    from kernels.markov_fused.exchange import compile_gather  # timed: part of getting the kernels
    from kernels.markov_fused.host import compile_kernel  # timed: part of getting the kernels
    from kernels.markov_fused.kernel import (
        AnchorKernel, CacheFillKernel, PickKernel, StepKernel)  # timed: part of getting the kernels

    row = dict(row_bytes=512, w1_rows=4096)
    return {"anchor": lambda: compile_kernel(AnchorKernel, chunk=16, **row),
            "pick[tp2]": lambda: compile_kernel(PickKernel, tp=2, pdl=True, chunk=16, **row),
            "step[b1024]": lambda: compile_kernel(StepKernel, block=1024, blocks=8, vector=True, has_cap=False,
                                                  sharded=True, pdl=True, chunk=16, **row),
            "cache_fill": lambda: compile_kernel(CacheFillKernel, vector=True),
            "gather[16]": lambda: compile_gather(16), "gather[2]": lambda: compile_gather(2)}

def head_variants(arch: str) -> dict:
    """The variant a ``HeadGemv`` at dim 256 compiles: name -> thunk."""
    from kernels.markov_fused.head_gemv import compiled_kernel  # timed: part of getting the kernels

    return {"head_gemv[d256]": lambda: compiled_kernel(256, 0.5, True)}


COMPILE_GROUPS = {"fused": fused_variants, "head": head_variants}
