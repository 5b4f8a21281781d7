"""The sharded Markov sampler's compile group, timed by ``python -m harness.bench.compile_profile``.

``COMPILE_GROUPS``: group name -> ``(arch) -> {variant name: thunk}``, the
kernel variants a rank of the family gets at construction, each thunk
getting one through the family's own compile function. The profiler imports
this module alone in a fresh process after timing torch and CuTe DSL, so it
imports nothing at the top: the kernels' imports inside each group are part
of what is timed.
"""


def sharded_variants(arch: str) -> dict:
    """The variant a ``ShardedMarkovSampler`` of 4 steps in bfloat16 compiles: name -> thunk."""
    from kernels.markov_sharded.host import compiled_kernel  # timed: part of getting the kernels

    return {"sample[s4,bf16]": lambda: compiled_kernel(4, "bfloat16", "bfloat16")}


COMPILE_GROUPS = {"sharded": sharded_variants}
