"""torchrun bench cases of seed 004's all-reduce + mHC: ``allreduce_mhc/torchrun_tp{2,4}_h5120_m{1,8,32,128}``.

One process per rank (``harness.bench.cases.spawned`` says what that means
where ranks share a GPU). Per shape, each implementation is an entry of its
own, side by side in the summary's table:

- ``..._ll`` and ``..._bt``: the kernel (one instance with both
  protocols, the protocol forced per call), held to the golden bits
  (``golden.allreduce_mhc.reference`` on the CPU, every bit);
- ``..._unfused``, their baseline, the same eager form as the in-process
  cases: the ranks' sum taken locally (``x.sum(0)``, an all-reduce
  stand-in with no communication), then eager mHC and RMSNorm
  (``bench.mix_and_norm``);
- the peers a user would pick instead, each followed by that same eager
  tail: ``..._symm_one_shot`` (PyTorch's symmetric-memory
  ``torch.ops.symm_mem.one_shot_all_reduce_copy``: one kernel copies this
  rank's contribution into its symmetric buffer, then every rank sums
  every peer's buffer), ``..._symm_two_shot`` (``two_shot_all_reduce_``,
  in place: a copy into the buffer, then each rank reduces its slice and
  writes it to every peer), and ``..._nccl`` (``torch.distributed.all_reduce``
  over NCCL). NCCL needs a GPU per rank: where ranks share one, the
  entry is not available and says so. A peer that is missing from torch,
  refuses the shape or fails is not available with its exception's text;
  none of them fails the case.

A peer sums in its own order (symmetric memory: from the rank's own
buffer, rounding to BF16 after each add; NCCL: its ring), not the
contract's FP32 sum from rank 0, so it is not held to the bits: its entry
records, per output, the largest distance from the golden bits in BF16
ulps (``golden_ulp``) and whether it lies within 4 BF16 ulps of the
operands' magnitude of a float64 recomputation (``plausible``), the
bound the kernels' own sanity check uses. The unfused baseline is held
to that bound (it fails otherwise) and records its distance too.

Floors: ``bench.floor_terms`` for the ranks this GPU holds. Every
implementation's outputs are checked before timing, as the in-process cases
do. The crossover of LL and BT measured here is keyed by the provider
``symmetric`` only where each rank has its own GPU, ``symmetric-shared``
otherwise, so that ranks taking turns on one GPU never set the thresholds
of ranks on NVLink.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.bench.cases.checks import BenchSanityError, check_equal, tensor_bytes
from harness.bench.cases.spawned import CASE_NOTE, NEEDS_OWN_GPU, shared_note
from harness.bench.floor import terms_bytes
from harness.bench.registry import Prepared, bench_case
from harness.bench.torchrun_rank import NotAvailable, RankContext, RankImpl
from harness.families.allreduce_mhc import bench as ar

TORCHRUN_TP = (2, 4)
TORCHRUN_ROWS = (1, 8, 32, 128)  # through 128 (the capacity): the LL/BT crossover recorded spans every M
TORCHRUN_HIDDEN = 5120
# Peers: entry suffix -> the all-reduce it runs before the eager tail.
PEERS = {
    "symm_one_shot": "torch symm_mem one_shot_all_reduce_copy",
    "symm_two_shot": "torch symm_mem two_shot_all_reduce_",
    "nccl": "torch.distributed.all_reduce (NCCL)",
}
# What each kind of implementation is held to in its check (``_judge``), as the summary states it.
HELD_TO = {
    "bits": "the golden bits, every one",
    "tolerance": "4 BF16 ulps of the operands' magnitude of a float64 recomputation (the baseline's sanity check)",
    "report": "nothing (a peer summing in its own order); within 4 BF16 ulps of the operands' magnitude is plausible",
}


def _judge(case: str, outputs: dict, check: dict, weight: torch.Tensor, golden: dict, held: str) -> dict:
    """Check one implementation's outputs of the check call; return what it found.

    ``held`` is ``bits`` (every bit equal to the golden's, else
    ``BenchSanityError``), ``tolerance`` (within 4 BF16 ulps of the operands'
    magnitude of the float64 recomputation, else the error) or ``report``
    (a peer: both measured, nothing raised).
    """
    found = {"golden_ulp": ar.golden_distance(outputs, golden), "held_to": HELD_TO[held]}
    if held == "bits":
        for name in ar.OUTPUTS:  # the golden ran on the CPU
            check_equal(case, f"{name} (against the golden bits)", outputs[name].cpu(), golden[name])
        return found
    try:
        ar.check_outputs(case, [outputs], check, weight)
        found["plausible"] = True
    except BenchSanityError as exc:
        if held == "tolerance":
            raise
        found.update(plausible=False, plausibility_error=str(exc))
    return found


def _allreduce_prepared(ctx: RankContext, *, rows: int, case: str, call, params: dict, held: str) -> Prepared:
    """A checked ``call(inputs, weight) -> outputs`` of one all-reduce implementation at ``rows`` on this rank; what
    the check found goes into ``params``."""
    tp, device, hidden = ctx.fabric.world, ctx.device, TORCHRUN_HIDDEN
    weight = ar.make_weight(device, hidden)
    gen = torch.Generator(device=device).manual_seed(1000 * tp + rows)  # the same inputs on every rank
    check = ar.make_inputs(device, gen, tp=tp, rows=rows, hidden=hidden)
    out = call(check, weight)
    if device.type == "cuda":  # the CPU tests run the check of the eager implementations on the CPU
        torch.cuda.synchronize(device)
    params.update(_judge(case, out, check, weight, ar.golden_outputs(check, weight, tp=tp, hidden=hidden), held))
    if params.get("plausible") is False:
        # A peer that is not right is no comparison: it is not timed, and says why (its distance stays in params).
        shared = f" ({ctx.sharing} ranks sharing one GPU)" if ctx.sharing > 1 else ""
        raise NotAvailable(f"not timed: its outputs failed the golden sanity check{shared}: "
                           f"{params['plausibility_error']}")
    terms = ar.floor_terms(tp=tp, rows=rows, hidden=hidden, ranks=ctx.sharing)
    return Prepared(
        bytes_moved=terms_bytes(terms),
        floor_terms=terms,
        input_bytes=tensor_bytes(check),
        new_input_set=lambda: ar.make_inputs(device, gen, tp=tp, rows=rows, hidden=hidden),
        launch=lambda inputs: call(inputs, weight),
        kernels_per_call=ar.chain_launches("ll"),
    )


def _symm_call(ctx: RankContext, rows: int, op: str):
    """``call(inputs, weight)``: the symmetric-memory all-reduce ``op`` of this rank's contribution, then the eager
    tail; the op and the rendezvous are looked up first, so that a torch without them says so here."""
    import torch.distributed._symmetric_memory as symm  # noqa: PLC0415 - a private torch module only these peers use

    # The op first: a torch without it fails alike on every rank, before the collective rendezvous.
    reduce_op = getattr(torch.ops.symm_mem, "one_shot_all_reduce_copy" if op == "one_shot" else "two_shot_all_reduce_")
    rank, group = ctx.fabric.rank, dist.group.WORLD.group_name
    buffer = symm.empty((rows, TORCHRUN_HIDDEN), dtype=torch.bfloat16, device=ctx.device)
    symm.rendezvous(buffer, group)
    if op == "one_shot":
        def call(inputs: dict, weight: torch.Tensor) -> dict:
            """One kernel: this rank's rows into its buffer, then every buffer summed into a new tensor."""
            return ar.mix_and_norm(reduce_op(buffer, inputs["x"][rank], "sum", group), inputs, weight)
    else:
        def call(inputs: dict, weight: torch.Tensor) -> dict:
            """This rank's rows copied into its buffer, reduced there in place (each rank its slice, then gathered)."""
            buffer.copy_(inputs["x"][rank])
            return ar.mix_and_norm(reduce_op(buffer, "sum", group), inputs, weight)
    return call


def _nccl_call(ctx: RankContext):
    """``call(inputs, weight)``: NCCL all-reduce of a copy of this rank's contribution, then the eager tail;
    ``NotAvailable`` where ranks share a GPU or the group is not NCCL's."""
    if ctx.sharing > 1:
        raise NotAvailable(NEEDS_OWN_GPU.format(sharing=ctx.sharing))
    if ctx.backend != "nccl":
        raise NotAvailable(f"needs the NCCL backend (the process group runs {ctx.backend})")
    rank = ctx.fabric.rank

    def call(inputs: dict, weight: torch.Tensor) -> dict:
        """``dist.all_reduce`` over the world group, on the current stream (capturable with NCCL)."""
        reduced = inputs["x"][rank].clone()
        dist.all_reduce(reduced)
        return ar.mix_and_norm(reduced, inputs, weight)
    return call


def _allreduce_impls(ctx: RankContext, *, rows: int) -> list[RankImpl]:
    """The kernel (LL and BT), the unfused baseline and the peers at one shape, in that order."""
    tp, hidden = ctx.fabric.world, TORCHRUN_HIDDEN
    base = f"torchrun_tp{tp}_h{hidden}_m{rows}"
    common = {"tp": tp, "hidden": hidden, "rows": rows, "hc": ar.HC, "source": "plain (torchrun)",
              "floor_rule": ar.FLOOR_RULE, "provider": "symmetric" if ctx.sharing == 1 else "symmetric-shared",
              "virtual_ranks": False, "peer_group": base, **shared_note(ctx)}
    systems: list = []

    def kernel(protocol: str, params: dict) -> Prepared:
        """The public kernel over this rank's fabric (built once for both protocols), ``protocol`` forced."""
        if not systems:
            from harness.families.allreduce_mhc.kernel import AllReduceMHCSystem  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

            systems.append(AllReduceMHCSystem(ctx.fabric, {"norm_weight": ar.make_weight(ctx.device, hidden)},
                                              ar.make_config(tp=tp, hidden=hidden, bt=True), timeout_ms=ar.TIMEOUT_MS))
        return _allreduce_prepared(ctx, rows=rows, case=f"allreduce_mhc/{base}_{protocol}", params=params,
                                   held="bits", call=lambda inputs, _w: systems[0].launch(inputs, {"protocol": protocol}))

    def impl(name: str, description: str, make_call, held: str, optional: bool, **extra) -> RankImpl:
        """A RankImpl whose prepare checks ``make_call()``'s outputs into its own params."""
        params = {**common, "impl": name, "protocol": name, **extra}
        return RankImpl(f"{base}_{name}", params, description, optional=optional, prepare=lambda: _allreduce_prepared(
            ctx, rows=rows, case=f"allreduce_mhc/{base}_{name}", params=params, held=held, call=make_call()))

    impls = [
        RankImpl(f"{base}_{protocol}", params, f"AllReduceMHC {protocol.upper()}, {tp} torchrun processes",
                 lambda protocol=protocol, params=params: kernel(protocol, params))
        for protocol in ("ll", "bt")
        for params in [{**common, "impl": protocol, "protocol": protocol, "baseline": f"{base}_unfused"}]
    ]
    impls.append(impl("unfused", "unfused: local x.sum(0) stand-in + eager mHC + RMSNorm",
                      lambda: lambda inputs, weight: ar.unfused(inputs, weight), "tolerance", False,
                      protocol="unfused", note="; ".join(filter(None, [common.get("note"), ar.STAND_IN_NOTE]))))
    makers = {"symm_one_shot": lambda: _symm_call(ctx, rows, "one_shot"),
              "symm_two_shot": lambda: _symm_call(ctx, rows, "two_shot"), "nccl": lambda: _nccl_call(ctx)}
    impls += [impl(name, f"peer: {PEERS[name]} + eager mHC + RMSNorm", makers[name], "report", True, peer=True)
              for name in PEERS]
    return impls


def _register() -> None:
    """Register the torchrun cases (none in the default set)."""
    for tp in TORCHRUN_TP:
        for rows in TORCHRUN_ROWS:
            bench_case("allreduce_mhc", f"torchrun_tp{tp}_h{TORCHRUN_HIDDEN}_m{rows}", launcher="torchrun", world=tp,
                       default=False, params={"tp": tp, "hidden": TORCHRUN_HIDDEN, "rows": rows, "note": CASE_NOTE},
                       description=f"torchrun, {tp} processes: LL, BT, unfused (x.sum(0) + eager), peers: "
                                   "torch symm_mem one-shot and two-shot, NCCL (a GPU per rank)")(
                lambda ctx, rows=rows: _allreduce_impls(ctx, rows=rows))


_register()
