"""torchrun bench case of seed 000's sharded Markov sampler: ``markov_sharded/torchrun_r8_s8_v129280_w2``.

One process per rank (``harness.bench.cases.spawned`` says what that means
where ranks share a GPU): ``..._kernel`` (the sampler, each rank its own
launch; grids sized to share the GPU where they must) and ``..._eager``
(the torch loop on rank 0 alone, its baseline). Floors:
``bench.floor_terms`` for the ranks this GPU holds (its formula in the
results). Every implementation's outputs are checked before timing, as the
in-process cases do.
"""

from __future__ import annotations

import torch

from harness.bench.cases.checks import tensor_bytes
from harness.bench.cases.spawned import CASE_NOTE, shared_note
from harness.bench.floor import terms_bytes
from harness.bench.registry import Prepared, bench_case
from harness.bench.torchrun_rank import RankContext, RankImpl
from harness.families.markov_sharded import bench as ms


def _sampler_impls(ctx: RankContext) -> list[RankImpl]:
    """The sampler kernel on every rank and the torch loop on rank 0 (its baseline)."""
    world, device = ctx.fabric.world, ctx.device
    base = f"torchrun_r{ms.ROWS}_s{ms.STEPS}_v{ms.VOCAB}_w{world}"
    params = {"rows": ms.ROWS, "steps": ms.STEPS, "vocab": ms.VOCAB, "dim": ms.DIM, **shared_note(ctx)}

    def prepared(check: dict, launch, terms, kernels: int) -> Prepared:
        """A prepared sampler call whose inputs come from the case's seed."""
        gen = torch.Generator(device=device).manual_seed(5)
        return Prepared(bytes_moved=terms_bytes(terms), floor_terms=terms, input_bytes=tensor_bytes(check),
                        new_input_set=lambda: ms.make_inputs(device, gen, 1), launch=launch, kernels_per_call=kernels)

    def kernel() -> Prepared:
        """This rank's sampler over its fabric, checked along its own chain."""
        from harness.families.markov_sharded.kernel import ShardedMarkovSystem  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

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


bench_case("markov_sharded", f"torchrun_r{ms.ROWS}_s{ms.STEPS}_v{ms.VOCAB}_w2", launcher="torchrun", world=2,
           default=False, params={"world": 2, "note": CASE_NOTE},
           description="torchrun, 2 processes: the sampler kernel, and the torch loop on rank 0")(_sampler_impls)
