"""The all-reduce's compile group, timed by ``python -m harness.bench.compile_profile``.

``COMPILE_GROUPS["allreduce"]``: the publish, consumer and owner-reduce
variants an ``AllReduceMHC`` with BT compiles; the profiler imports this
module alone in its fresh process, so the kernels' imports stay inside the
function: they are part of the time it measures.
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
