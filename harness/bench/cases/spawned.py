"""torchrun bench cases: the all-reduce (seed 004) and the sampler (seed 000), one process per rank.

Each case runs in ``world`` processes (``harness.bench.torchrun``), every
rank on a ``kernels.fabric.SymmetricFabric``; with fewer GPUs than ranks
the processes share one GPU (gloo, overlapping devices), which proves the
path and is not an NVLink time; unchanged on a node with a GPU per rank
(NCCL). None is in the default set: they are run explicitly
(``--case allreduce_mhc/torchrun_tp2_h5120_m8``).

- ``allreduce_mhc/torchrun_tp2_h5120_m{1,8,128}``: per shape three entries,
  ``..._ll`` (the kernel, LL), ``..._unfused`` (``torch.distributed.all_reduce``
  over the process group, NCCL or gloo, then eager mHC and RMSNorm:
  ``allreduce_mhc.mix_and_norm``; the LL entry's baseline) and the peer
  ``..._symm_mem`` (PyTorch's symmetric-memory one-shot all-reduce,
  ``torch.ops.symm_mem.one_shot_all_reduce``, then the same eager tail),
  where it runs. A gloo all-reduce cannot be captured in a CUDA graph: that
  entry is timed eagerly and says so.
- ``markov_sharded/torchrun_r8_s8_v129280_w2``: ``..._kernel`` (the sampler,
  each rank its own launch; grids sized to share the GPU where they must)
  and ``..._eager`` (the torch loop on rank 0 alone, its baseline).

Floors: the all-reduce's is ``allreduce_mhc.floor_bytes`` for the ranks
this GPU holds; the sampler's ``markov_sharded.floor_terms`` for the ranks
this GPU holds (its formula in the results). Every implementation's
outputs are checked before timing, as the in-process cases do.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.bench.cases import allreduce_mhc as ar, markov_sharded as ms
from harness.bench.cases.checks import tensor_bytes
from harness.bench.floor import terms_bytes
from harness.bench.registry import Prepared, bench_case
from harness.bench.torchrun_rank import RankContext, RankImpl

SHARED_NOTE = "torchrun processes sharing one GPU: proves the path, not an NVLink time"
CASE_NOTE = "one process per rank; where they share one GPU, not a latency measurement of NVLink"


def _note(ctx: RankContext) -> dict:
    """The note of entries whose ranks share a GPU (none where each rank has its own)."""
    return {"note": SHARED_NOTE} if ctx.sharing > 1 else {}


def _allreduce_prepared(ctx: RankContext, *, rows: int, hidden: int, case: str, call, capturable: bool = True) -> Prepared:
    """A checked ``call(inputs) -> outputs`` of one all-reduce implementation at (rows, hidden) on this rank."""
    tp, device = ctx.fabric.world, ctx.device
    weight = ar.make_weight(device, hidden)
    gen = torch.Generator(device=device).manual_seed(1000 * tp + rows)  # the same inputs on every rank
    check = ar.make_inputs(device, gen, tp=tp, rows=rows, hidden=hidden)
    out = call(check, weight)
    torch.cuda.synchronize(device)
    ar.check_outputs(case, [out], check, weight)
    return Prepared(
        bytes_moved=ar.floor_bytes(tp=tp, rows=rows, hidden=hidden) * ctx.sharing // tp,
        input_bytes=tensor_bytes(check),
        new_input_set=lambda: ar.make_inputs(device, gen, tp=tp, rows=rows, hidden=hidden),
        launch=lambda inputs: call(inputs, weight),
        kernels_per_call=ar.chain_launches("ll"),
        capturable=capturable,
    )


def _allreduce_impls(ctx: RankContext, *, rows: int, hidden: int) -> list[RankImpl]:
    """The kernel (LL), the unfused baseline and the symmetric-memory peer at one shape."""
    tp, rank = ctx.fabric.world, ctx.fabric.rank
    base = f"torchrun_tp{tp}_h{hidden}_m{rows}"
    params = {"tp": tp, "hidden": hidden, "rows": rows, "hc": ar.HC, "provider": "symmetric",
              "source": "plain (torchrun)", "virtual_ranks": False, **_note(ctx)}

    def kernel() -> Prepared:
        """The public kernel over this rank's fabric, LL forced."""
        from harness.families.allreduce_mhc_kernel import AllReduceMHCSystem  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

        weight = ar.make_weight(ctx.device, hidden)
        system = AllReduceMHCSystem(ctx.fabric, {"norm_weight": weight}, ar.make_config(tp=tp, hidden=hidden, bt=False),
                                    timeout_ms=ar.TIMEOUT_MS)
        return _allreduce_prepared(ctx, rows=rows, hidden=hidden, case=f"allreduce_mhc/{base}_ll",
                                   call=lambda inputs, _w: system.launch(inputs, {"protocol": "ll"}))

    def unfused() -> Prepared:
        """``torch.distributed.all_reduce`` of this rank's contribution, then eager mHC and RMSNorm."""
        def call(inputs: dict, weight: torch.Tensor) -> dict:
            reduced = inputs["x"][rank].clone()
            dist.all_reduce(reduced)
            return ar.mix_and_norm(reduced, inputs, weight)

        return _allreduce_prepared(ctx, rows=rows, hidden=hidden, case=f"allreduce_mhc/{base}_unfused", call=call,
                                   capturable=ctx.backend == "nccl")

    def symm_mem() -> Prepared:
        """PyTorch's symmetric-memory one-shot all-reduce, then the same eager tail."""
        import torch.distributed._symmetric_memory as symm  # noqa: PLC0415 - a private torch module only this case uses

        group = dist.group.WORLD.group_name
        buffer = symm.empty((rows, hidden), dtype=torch.bfloat16, device=ctx.device)
        symm.rendezvous(buffer, group)

        def call(inputs: dict, weight: torch.Tensor) -> dict:
            buffer.copy_(inputs["x"][rank])
            return ar.mix_and_norm(torch.ops.symm_mem.one_shot_all_reduce(buffer, "sum", group), inputs, weight)

        return _allreduce_prepared(ctx, rows=rows, hidden=hidden, case=f"allreduce_mhc/{base}_symm_mem", call=call)

    backend = f"torch.distributed.all_reduce ({ctx.backend})"
    return [
        RankImpl(f"{base}_ll", {**params, "impl": "ll", "protocol": "ll", "baseline": f"{base}_unfused"},
                 f"AllReduceMHC LL, {tp} torchrun processes", kernel),
        RankImpl(f"{base}_unfused", {**params, "impl": "unfused", "protocol": "unfused"},
                 f"unfused: {backend} + eager mHC + RMSNorm", unfused),
        RankImpl(f"{base}_symm_mem", {**params, "impl": "symm_mem", "protocol": "symm_mem", "peer": True},
                 "peer: torch symm_mem one_shot_all_reduce + eager mHC + RMSNorm", symm_mem, optional=True),
    ]


def _sampler_impls(ctx: RankContext) -> list[RankImpl]:
    """The sampler kernel on every rank and the torch loop on rank 0 (its baseline)."""
    world, device = ctx.fabric.world, ctx.device
    base = f"torchrun_r{ms.ROWS}_s{ms.STEPS}_v{ms.VOCAB}_w{world}"
    params = {"rows": ms.ROWS, "steps": ms.STEPS, "vocab": ms.VOCAB, "dim": ms.DIM, **_note(ctx)}

    def prepared(check: dict, launch, terms, kernels: int) -> Prepared:
        """A prepared sampler call whose inputs come from the case's seed."""
        gen = torch.Generator(device=device).manual_seed(5)
        return Prepared(bytes_moved=terms_bytes(terms), floor_terms=terms, input_bytes=tensor_bytes(check),
                        new_input_set=lambda: ms.make_inputs(device, gen, 1), launch=launch, kernels_per_call=kernels)

    def kernel() -> Prepared:
        """This rank's sampler over its fabric, checked along its own chain."""
        from harness.families.markov_sharded_kernel import ShardedMarkovSystem  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

        static = ms.make_static(device)
        system = ShardedMarkovSystem(ctx.fabric, static, {**ms.make_config(world), "ranks_per_device": ctx.sharing})
        check = ms.make_inputs(device, torch.Generator(device=device).manual_seed(4), 1)
        ms.chain_check(f"markov_sharded/{base}_kernel", static, check, system.launch(ms.rank_inputs(check, 0), ms.PARAMS))
        terms = ms.floor_terms(rows=ms.ROWS, steps=ms.STEPS, vocab=ms.VOCAB, world=world, sm_count=ctx.sm_count,
                               sharing=ctx.sharing)
        return prepared(check, lambda inputs: system.launch(ms.rank_inputs(inputs, 0), ms.PARAMS), terms, 1)

    def eager() -> Prepared:
        """The torch loop on this GPU alone (rank 0)."""
        static = ms.make_static(device)
        check = ms.make_inputs(device, torch.Generator(device=device).manual_seed(4), 1)
        ms.chain_check(f"markov_sharded/{base}_eager", static, check, ms.eager_loop(static, check))
        terms = ms.floor_terms(rows=ms.ROWS, steps=ms.STEPS, vocab=ms.VOCAB, world=1, sm_count=ctx.sm_count)
        return prepared(check, lambda inputs: ms.eager_loop(static, inputs), terms, 1)

    return [
        RankImpl(f"{base}_kernel", {**params, "world": world, "impl": "kernel", "baseline": f"{base}_eager"},
                 f"ShardedMarkovSampler, {world} torchrun processes", kernel),
        RankImpl(f"{base}_eager", {**params, "world": 1, "impl": "eager torch loop"},
                 "torch loop on rank 0 alone", eager, all_ranks=False),
    ]


def _register() -> None:
    """Register the torchrun cases (none in the default set)."""
    for rows in (1, 8, 128):
        bench_case("allreduce_mhc", f"torchrun_tp2_h5120_m{rows}", launcher="torchrun", world=2, default=False,
                   params={"tp": 2, "hidden": 5120, "rows": rows, "note": CASE_NOTE},
                   description="torchrun, 2 processes: LL, unfused (torch.distributed.all_reduce + eager), "
                               "torch symm_mem one-shot peer")(
            lambda ctx, rows=rows: _allreduce_impls(ctx, rows=rows, hidden=5120))
    bench_case("markov_sharded", f"torchrun_r{ms.ROWS}_s{ms.STEPS}_v{ms.VOCAB}_w2", launcher="torchrun", world=2,
               default=False, params={"world": 2, "note": CASE_NOTE},
               description="torchrun, 2 processes: the sampler kernel, and the torch loop on rank 0")(_sampler_impls)


_register()
