"""The sharded Markov sampler's compile group, timed by ``python -m harness.bench.compile_profile``.

``COMPILE_GROUPS["sharded"]``: the one cooperative kernel a 4-step BF16
``ShardedMarkovSampler`` compiles, imported inside the function because the
profiler times that import.
"""


def sharded_variants(arch: str) -> dict:
    """The variant a ``ShardedMarkovSampler`` of 4 steps in bfloat16 compiles: name -> thunk."""
    from kernels.markov_sharded.host import compiled_kernel  # timed: part of getting the kernels

    return {"sample[s4,bf16]": lambda: compiled_kernel(4, "bfloat16", "bfloat16")}


COMPILE_GROUPS = {"sharded": sharded_variants}
