"""The all-reduce's compile group, timed by ``python -m harness.bench.compile_profile``.

``COMPILE_GROUPS``: group name -> ``(arch) -> {variant name: thunk}``, the
kernel variants a rank of the family gets at construction, each thunk
getting one through the family's own compile function. The profiler imports
this module alone in a fresh process after timing torch and CuTe DSL, so it
imports nothing at the top: the kernels' imports inside each group are part
of what is timed.
"""


def allreduce_variants(arch: str) -> dict:
    """The variants an ``AllReduceMHC`` with BT enabled compiles (tp 2, hidden 5120, capacity 128): name -> thunk."""
    from kernels.allreduce_mhc import variants  # timed: part of getting the kernels
    from kernels.allreduce_mhc.consumer import LamportMHCConsumer  # timed: part of getting the kernels
    from kernels.allreduce_mhc.owner_reduce import OwnerReduceKernel  # timed: part of getting the kernels
    from kernels.allreduce_mhc.publish import PublishKernel  # timed: part of getting the kernels

    shape = dict(hidden=5120, tp=2, capacity=128)
    thunks = {}
    for protocol in ("ll", "bt"):
        for source in ("plain", "finalize"):
            thunks[f"publish[{protocol},{source}]"] = lambda p=protocol, s=source: variants.compiled(
                PublishKernel(**shape, protocol=p, source=s, fanout="unicast", top_k=8), arch)
        thunks[f"consumer[{protocol},plain]"] = lambda p=protocol: variants.compiled(LamportMHCConsumer(
            **shape, hc=4, reduced_input=p == "bt", output="plain", arch=arch), arch)
    thunks["owner_reduce"] = lambda: variants.compiled(OwnerReduceKernel(**shape, fanout="unicast"), arch)
    return thunks


COMPILE_GROUPS = {"allreduce": allreduce_variants}
