"""Benchmark cases of seed 004's all-reduce + mHC + RMSNorm (``kernels.allreduce_mhc.AllReduceMHC``).

Virtual ranks on ONE GPU (``harness.bench.cases.virtual``): the ranks share its SMs and
exchange through its memory, so these times are not a latency measurement
of NVLink; they compare implementations on the same footing. Cases, hc 4,
plain output (no MXFP8), ``top_k`` 8, ``capacity`` 128:

- tp 2, H in {5120, 7168}, M in {1, 8, 16, 32, 64, 128}: ``unfused``
  (torch), then ``ll`` and ``bt`` (the kernel, protocol forced per call),
  then ``finalize_ll`` and ``finalize_bt`` (the MoE-finalize source: each
  rank gathers its ``top_k`` routed rows, weighted, plus its shared
  output). The LL and BT medians of one source give the measured LL/BT
  crossover (``harness.families.allreduce_mhc.thresholds``);
- tp 4 and 8, H 5120, M in {1, 8, 32, 128}: ``unfused`` and ``ll`` (every
  decode size at every virtual world; BT is not built there, to keep
  compile time down); the default set keeps tp 4 at M 1 and 128 (the M of
  the published figures), the rest run with ``--all`` or ``--case``.
- tp 2, H 5120: ``ll`` at M 1 and ``bt`` at M 128 again, ``_noflight``:
  the kernels without the flight recorder (``kernels.flight``; their own
  instance), ``flight_cost_of`` naming the case with it; the run's line
  shows the recorder's cost.

Every plain LL case is timed twice in one graph method: each call forked
and joined across the rank streams (lockstep, the ``graph`` column, as
every other case) and with each rank's calls back to back on its stream
(``graph_chained``, ``rank_chains``), which is how ranks on their own GPUs
run them; the difference is the virtual ranks' cost, not the kernel's.

The unfused path per rank, on its stream: the all-reduce's stand-in, a sum
over the ranks' contributions in one process (``x.sum(0)``: in a real run
this would be NCCL; its published time is a reference row), then mHC post
and collapse and RMSNorm in eager torch (FP32 math, BF16 results).

Floor (all three of one shape; ``floor_terms``, stated as ``FLOOR_RULE``
in every entry): the bytes every rank must move once, its contribution,
residual and the small FP32 mixing inputs read, residual_out and
layer_input written, its contribution written to and read from each peer,
over the copy bandwidth measured in the run, plus the launches on one
rank's chain (publish, consumer; ranks run side by side), LL's count for
all three so the floors are equal.

Sanity, before timing: each rank's outputs of one call equal rank 0's
(bits), LL and BT give the same bits where the instance has both, and
residual_out / layer_input lie within a few BF16 roundings of a float64
recomputation (``checks.check_close``, tolerance relative to the operands'
magnitude). The unfused case checks its outputs against the same recomputation.
The finalize cases check rank agreement and LL = BT bits only (their golden
bits are the scenarios' job: ``harness validate``), and have no unfused
baseline: they exist for the crossover.

Published figures (FlashInfer, REFERENCE section 4) ride along as
``references`` rows labelled ``published, not measured here``.

The default set (``python -m harness bench`` without ``--all``) keeps the
plain source at M in ``DEFAULT_ROWS`` (every implementation, both H, both
tp): enough points for the latency-against-M curves and the LL/BT crossover
within the bench's time budget. The other M and the finalize cases run with
``--all`` (or ``--case``); ``harness.families.allreduce_mhc.thresholds`` wants them.
"""

from __future__ import annotations

import torch

from contracts.deadlines import BENCH_TIMEOUT_MS
from golden import allreduce_mhc as golden_allreduce
from harness.bench.cases.checks import check_close, check_equal, max_ulp_distance, tensor_bytes
from harness.bench.cases.virtual import build_ranks, launch_ranks, rank_chains
from harness.bench.floor import FloorTerm, terms_bytes
from harness.bench.registry import BenchContext, Prepared, bench_case
from harness.families.allreduce_mhc import thresholds

HC, TOP_K, CAPACITY, EPS = 4, 8, 128, 1e-6
TIMEOUT_MS = BENCH_TIMEOUT_MS  # a lost peer traps with its diagnostic record after 2 s
TABLE_LAYOUT = "allreduce"  # the report's rows: LL, BT, the unfused path and the peers per M (harness.bench.tables)
RECORD_THRESHOLDS = thresholds.record  # a bench run's measured LL/BT crossovers go into the thresholds table
VIRTUAL_NOTE = "virtual ranks on one GPU: not a latency measurement of NVLink"
STAND_IN_NOTE = "all-reduce stand-in: in-process sum over the ranks' tensors (x.sum(0)), not NCCL"
_FLASHINFER = "FlashInfer PR #5178 (REFERENCE.md section 4); published, not measured here"
_NCCL = "FlashInfer commit b190523e3 (REFERENCE.md section 4); published, not measured here"
# tp / hidden / rows / protocol say where a figure applies (the summary's
# "FlashInfer" column matches them against the case's shape).
PUBLISHED = {
    1: (
        {"source": _FLASHINFER, "value_us": 4.09, "note": "FlashInfer LL, H=5120, M=1, TP4", "published": True,
         "tp": 4, "hidden": 5120, "rows": 1, "protocol": "ll"},
        {"source": _FLASHINFER, "value_us": 4.81, "note": "FlashInfer LL, H=5120, M=1, TP8", "published": True,
         "tp": 8, "hidden": 5120, "rows": 1, "protocol": "ll"},
    ),
    128: (
        {"source": _FLASHINFER, "value_us": 9.3, "note": "FlashInfer LL, H=5120, M=128, TP4 (about)", "published": True,
         "tp": 4, "hidden": 5120, "rows": 128, "protocol": "ll"},
        {"source": _FLASHINFER, "value_us": 9.9, "note": "FlashInfer LL, H=5120, M=128, TP8 (about)", "published": True,
         "tp": 8, "hidden": 5120, "rows": 128, "protocol": "ll"},
    ),
}
NCCL_PUBLISHED = (
    {"source": _NCCL, "value_us": 16.6, "note": "NCCL all-reduce 8xH200, 2 KB message", "published": True},
    {"source": _NCCL, "value_us": 20.8, "note": "NCCL all-reduce 8xH200, 512 KB message", "published": True},
)
DEFAULT_ROWS = (1, 8, 32, 128)
FLOOR_RULE = ("bytes per rank: contribution M x H x 2 B read + residual M x hc x H x 2 B read + residual_out "
              "M x hc x H x 2 B written + layer_input M x H x 2 B written + post, comb, pre M x (2 hc + hc^2) x 4 B "
              "read + 2 x (tp - 1) x M x H x 2 B to and from the peers (finalize: the contribution read is "
              "M x H x 2 B x (top_k + 1) + M x top_k x 8 B); times the ranks the GPU holds (tp for virtual ranks, "
              "the ranks per GPU under torchrun); plus 2 launches (LL's publish and consumer) for every implementation")
_SYSTEMS: dict[tuple, list] = {}


def floor_terms(*, tp: int, rows: int, hidden: int, hc: int = HC, finalize: bool = False,
                ranks: int | None = None) -> tuple[FloorTerm, ...]:
    """What ``ranks`` of the ``tp`` ranks (all of them by default) must move once for one call, term by term.

    Per rank: its contribution read, residual read, residual_out and
    layer_input written, the FP32 mixing inputs read, and its contribution
    written to and read from each peer. With ``finalize`` a rank's
    contribution is read as its ``top_k`` routed rows plus its shared output,
    with the weights and routes; every route is counted, dropped ones too, so
    the routed bytes are overstated by about the dropped third.
    """
    ranks = tp if ranks is None else ranks
    row = rows * hidden * 2
    each = f"{ranks} rank(s) x "
    if finalize:
        contribution = FloorTerm("routed rows, shared output, weights and routes read",
                                 each + f"({rows} x {hidden} x 2 B x ({TOP_K} + 1) + {rows} x {TOP_K} x 8 B)",
                                 ranks * (row * (TOP_K + 1) + rows * TOP_K * 8))
    else:
        contribution = FloorTerm("contribution x read", each + f"{rows} x {hidden} x 2 B", ranks * row)
    return (
        contribution,
        FloorTerm("residual read", each + f"{rows} x {hc} x {hidden} x 2 B", ranks * hc * row),
        FloorTerm("residual_out written", each + f"{rows} x {hc} x {hidden} x 2 B", ranks * hc * row),
        FloorTerm("layer_input written", each + f"{rows} x {hidden} x 2 B", ranks * row),
        FloorTerm("post, comb, pre (FP32) read", each + f"{rows} x ({hc} + {hc}^2 + {hc}) x 4 B",
                  ranks * rows * (hc + hc * hc + hc) * 4),
        FloorTerm("contribution to and from each peer", each + f"2 x ({tp} - 1) x {rows} x {hidden} x 2 B",
                  ranks * 2 * (tp - 1) * row),
    )


def floor_bytes(*, tp: int, rows: int, hidden: int, hc: int = HC, finalize: bool = False) -> int:
    """Bytes all ``tp`` ranks must move once for one call: the sum of ``floor_terms``."""
    return terms_bytes(floor_terms(tp=tp, rows=rows, hidden=hidden, hc=hc, finalize=finalize))


def chain_launches(protocol: str) -> int:
    """Kernels on one rank's chain: publish and consumer, plus the owner reduce for BT."""
    return {"ll": 2, "bt": 3}[protocol]


def make_config(*, tp: int, hidden: int, bt: bool) -> dict:
    """The family config; with ``bt`` both protocols are built (threshold 1), else LL only."""
    return dict(hidden=hidden, hc=HC, capacity=CAPACITY, top_k=TOP_K, tp=tp, eps=EPS, quantize=False,
                residual_only=False, bt_min_rows=1 if bt else CAPACITY + 1)


def make_weight(device: torch.device, hidden: int) -> torch.Tensor:
    """The RMSNorm weight, BF16 ``[H]`` around 1 (same for every case of one H)."""
    gen = torch.Generator(device=device).manual_seed(hidden)
    return (1.0 + 0.25 * torch.randn(hidden, device=device, generator=gen)).to(torch.bfloat16)


def make_inputs(device: torch.device, gen: torch.Generator, *, tp: int, rows: int, hidden: int) -> dict:
    """One call's full inputs (every rank takes ``x[rank]``)."""
    return {
        "x": torch.randn(tp, rows, hidden, device=device, generator=gen).to(torch.bfloat16),
        "residual": torch.randn(rows, HC, hidden, device=device, generator=gen).to(torch.bfloat16),
        "post": torch.rand(rows, HC, device=device, generator=gen) * 2.0,
        "comb": torch.rand(rows, HC, HC, device=device, generator=gen) / HC,
        "pre": torch.rand(rows, HC, device=device, generator=gen) / HC,
    }


def make_finalize_inputs(device: torch.device, gen: torch.Generator, *, tp: int, rows: int, hidden: int) -> dict:
    """One finalize call's full inputs: ``rows * top_k`` routed rows per rank, a third of the routes dropped (-1)."""
    routed = rows * TOP_K
    routes = torch.randint(0, routed, (tp, rows, TOP_K), device=device, generator=gen, dtype=torch.int32)
    dropped = torch.rand(tp, rows, TOP_K, device=device, generator=gen) < 1 / 3
    inputs = make_inputs(device, gen, tp=tp, rows=rows, hidden=hidden)
    del inputs["x"]
    return inputs | {
        "gemm2_permuted": torch.randn(tp, routed, hidden, device=device, generator=gen).to(torch.bfloat16),
        "expert_weights": torch.rand(rows, TOP_K, device=device, generator=gen),
        "expanded_idx_to_permuted_idx": torch.where(dropped, torch.full_like(routes, -1), routes),
        "shared_output": (0.5 * torch.randn(tp, rows, hidden, device=device, generator=gen)).to(torch.bfloat16),
    }


def unfused(inputs: dict, weight: torch.Tensor) -> dict:
    """One rank's unfused path: the all-reduce stand-in, then mHC post/collapse and RMSNorm in torch."""
    return mix_and_norm(inputs["x"].sum(dim=0), inputs, weight)


def mix_and_norm(reduced: torch.Tensor, inputs: dict, weight: torch.Tensor) -> dict:
    """mHC post and collapse, then RMSNorm, in eager torch (FP32 math, BF16 results) on the reduced sum."""
    mixed = torch.einsum("mih,mij->mjh", inputs["residual"].float(), inputs["comb"])
    residual_out = (mixed + reduced.float()[:, None, :] * inputs["post"][:, :, None]).to(torch.bfloat16)
    prenorm = (residual_out.float() * inputs["pre"][:, :, None]).sum(dim=1).to(torch.bfloat16).float()
    inv_rms = torch.rsqrt(prenorm.pow(2).mean(dim=-1, keepdim=True) + EPS)
    layer_input = (prenorm * inv_rms * weight.float()).to(torch.bfloat16)
    return {"residual_out": residual_out, "layer_input": layer_input}


def reference(inputs: dict, weight: torch.Tensor) -> dict:
    """Float64 values and operand magnitudes of both outputs; the reduced sum rounded to BF16 as both paths do."""
    x = inputs["x"].double()
    reduced = x.sum(dim=0).to(torch.bfloat16).double()
    res, post, comb, pre = (inputs[k].double() for k in ("residual", "post", "comb", "pre"))
    out = torch.einsum("mih,mij->mjh", res, comb) + reduced[:, None, :] * post[:, :, None]
    out_mag = torch.einsum("mih,mij->mjh", res.abs(), comb) + x.abs().sum(dim=0)[:, None, :] * post[:, :, None]
    prenorm = (out * pre[:, :, None]).sum(dim=1)
    inv_rms = torch.rsqrt(prenorm.pow(2).mean(dim=-1, keepdim=True) + EPS)
    gamma = weight.double()
    layer = prenorm * inv_rms * gamma
    layer_mag = (out_mag * pre[:, :, None]).sum(dim=1) * inv_rms * gamma.abs()
    return {"residual_out": (out, out_mag), "layer_input": (layer, layer_mag)}


def check_outputs(case: str, outputs: list[dict], inputs: dict, weight: torch.Tensor, *,
                   recompute: bool = True) -> None:
    """Every rank equals rank 0 (bits), and (with ``recompute``) rank 0 is close to the float64 recomputation."""
    for rank, out in enumerate(outputs[1:], start=1):
        for name in ("residual_out", "layer_input"):
            check_equal(case, f"rank {rank} {name}", out[name], outputs[0][name])
    if not recompute:
        return
    for name, (value, magnitude) in reference(inputs, weight).items():
        check_close(case, name, outputs[0][name], value, magnitude, ulps=4)


OUTPUTS = ("residual_out", "layer_input")


def golden_outputs(inputs: dict, weight: torch.Tensor, *, tp: int, hidden: int) -> dict:
    """The golden loop's outputs of one plain call (``golden.allreduce_mhc.reference``, run on the CPU)."""
    static = {"norm_weight": weight.cpu()}
    call = {name: value.cpu() for name, value in inputs.items()}
    return golden_allreduce.reference(static, make_config(tp=tp, hidden=hidden, bt=False), call, {"protocol": "ll"})


def golden_distance(outputs: dict, golden: dict) -> dict:
    """Per output, how far ``outputs`` lie from the golden bits (``checks.max_ulp_distance``)."""
    return {name: max_ulp_distance(outputs[name], golden[name]) for name in OUTPUTS}


def _ranks(device: torch.device, tp: int, hidden: int, bt: bool, flight: bool = True) -> list:
    """The cached virtual ranks of one (tp, H, flight recorder or not) instance (built, compiled and loaded once
    per process)."""
    from harness.families.allreduce_mhc.kernel import AllReduceMHCSystem  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

    key = (device, tp, hidden, bt, flight)
    if key not in _SYSTEMS:
        weight = make_weight(device, hidden)
        config = make_config(tp=tp, hidden=hidden, bt=bt)
        _SYSTEMS[key] = build_ranks(
            tp, device, lambda fabric: AllReduceMHCSystem(fabric, {"norm_weight": weight}, config,
                                                          timeout_ms=TIMEOUT_MS, flight_recorder=flight)
        )
    return _SYSTEMS[key]


def _kernel_setup(ctx: BenchContext, *, tp: int, rows: int, hidden: int, protocol: str, bt: bool,
                  finalize: bool = False, flight: bool = True) -> Prepared:
    """The kernel at one shape, source and protocol (with the flight recorder or without), with a checked call
    (and the other protocol's bits) first."""
    device = ctx.device
    ranks = _ranks(device, tp, hidden, bt, flight)
    weight = make_weight(device, hidden)
    gen = torch.Generator(device=device).manual_seed(1000 * tp + rows)
    make = make_finalize_inputs if finalize else make_inputs
    check = make(device, gen, tp=tp, rows=rows, hidden=hidden)
    case = f"allreduce_mhc/tp{tp}_h{hidden}_m{rows}_{'finalize_' if finalize else ''}{protocol}"

    def run(inputs: dict, chosen: str) -> list:
        """One call on every rank with ``chosen`` protocol."""
        params = {"finalize": finalize, "protocol": chosen}
        return launch_ranks(ranks, lambda rank, system: system.launch(inputs, params))

    outputs = run(check, protocol)
    torch.cuda.synchronize(device)
    check_outputs(case, outputs, check, weight, recompute=not finalize)  # finalize: no plain-x recomputation
    if bt:
        other = run(check, "bt" if protocol == "ll" else "ll")
        torch.cuda.synchronize(device)
        for name in ("residual_out", "layer_input"):
            check_equal(case, f"{name} (LL vs BT)", other[0][name], outputs[0][name])
    terms = floor_terms(tp=tp, rows=rows, hidden=hidden, finalize=finalize)
    return Prepared(
        bytes_moved=terms_bytes(terms),
        floor_terms=terms,
        input_bytes=tensor_bytes(check),
        new_input_set=lambda: make(device, gen, tp=tp, rows=rows, hidden=hidden),
        launch=lambda inputs: run(inputs, protocol),
        kernels_per_call=chain_launches("ll"),
        # LL's plain calls are also timed chained per rank (probed at tp 2/4/8, M 1-128: the bits of lockstep).
        rank_chains=(lambda: rank_chains(ranks)) if protocol == "ll" and not finalize else None,
    )


class _Streams:
    """Stand-in ranks for the unfused path: one side stream per rank (``launch_ranks`` only needs ``.stream``)."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device=device)


def _unfused_setup(ctx: BenchContext, *, tp: int, rows: int, hidden: int) -> Prepared:
    """The unfused torch path on ``tp`` rank streams, with a checked call first."""
    device = ctx.device
    weight = make_weight(device, hidden)
    ranks = [(_Streams(device), None) for _ in range(tp)]
    gen = torch.Generator(device=device).manual_seed(1000 * tp + rows)
    check = make_inputs(device, gen, tp=tp, rows=rows, hidden=hidden)

    def launch(inputs: dict) -> list:
        """Every rank's unfused path, forked and joined on the current stream."""
        return launch_ranks(ranks, lambda rank, _: unfused(inputs, weight))

    outputs = launch(check)
    torch.cuda.synchronize(device)
    check_outputs(f"allreduce_mhc/tp{tp}_h{hidden}_m{rows}_unfused", outputs, check, weight)
    terms = floor_terms(tp=tp, rows=rows, hidden=hidden)
    return Prepared(
        bytes_moved=terms_bytes(terms),
        floor_terms=terms,
        input_bytes=tensor_bytes(check),
        new_input_set=lambda: make_inputs(device, gen, tp=tp, rows=rows, hidden=hidden),
        launch=launch,
        kernels_per_call=chain_launches("ll"),
    )


def _register(tp: int, hidden: int, rows: int, impl: str, bt: bool, flight: bool = True) -> None:
    """Register one case: ``impl`` is ``unfused``, ``ll``, ``bt``, ``finalize_ll`` or ``finalize_bt``; a kernel
    case without the flight recorder (``_noflight``) names the case with it (``flight_cost_of``)."""
    name = f"tp{tp}_h{hidden}_m{rows}_{impl}" + ("" if flight else "_noflight")
    finalize = impl.startswith("finalize_")
    protocol = impl.removeprefix("finalize_")
    params = {"tp": tp, "hidden": hidden, "rows": rows, "hc": HC, "impl": impl, "virtual_ranks": True,
              "provider": "virtual", "source": "finalize" if finalize else "plain", "protocol": protocol,
              "note": VIRTUAL_NOTE, "floor_rule": FLOOR_RULE}
    references: tuple = PUBLISHED.get(rows, ()) if hidden == 5120 and impl in ("ll", "bt") else ()
    if impl == "unfused":
        params["note"] = f"{VIRTUAL_NOTE}; {STAND_IN_NOTE}"
        references = NCCL_PUBLISHED
        setup = lambda ctx: _unfused_setup(ctx, tp=tp, rows=rows, hidden=hidden)  # noqa: E731
        description = f"unfused, {tp} virtual ranks: sum stand-in + torch mHC + RMSNorm"
    else:
        if not finalize:
            params["baseline"] = f"tp{tp}_h{hidden}_m{rows}_unfused"
        if not flight:
            # Not an LL/BT measurement of the tables and thresholds: the protocol is only the case's setup.
            params.pop("baseline", None)
            params.update(protocol=f"{protocol} (no flight recorder)", flight_recorder=False,
                          flight_cost_of=f"tp{tp}_h{hidden}_m{rows}_{impl}")
        setup = lambda ctx: _kernel_setup(ctx, tp=tp, rows=rows, hidden=hidden, protocol=protocol,  # noqa: E731
                                          bt=bt, finalize=finalize, flight=flight)
        description = (f"AllReduceMHC {'finalize ' if finalize else ''}{protocol.upper()}, {tp} virtual ranks "
                       "on one GPU (not an NVLink latency)" + ("" if flight else ", without the flight recorder"))
    # The _noflight twins too (the recorder's cost in every run); at tp 4 only the published M, so the set fits
    # its budget (harness.bench.budget); tp 8 and the other M at tp 4 by --all or --case.
    default = rows in DEFAULT_ROWS and not finalize and (tp == 2 or (tp == 4 and rows in PUBLISHED))
    bench_case("allreduce_mhc", name, params=params, description=description, references=references,
               default=default)(setup)


# Order: every torch case first, then LL, then BT, then finalize, then the 4- and 8-rank
# instances, so that a kernel trap (which ends the CUDA context) costs the fewest cases.
_SHAPES_TP2 = [(hidden, rows) for hidden in (5120, 7168) for rows in (1, 8, 16, 32, 64, 128)]
_SHAPES_TP4_TP8 = [(tp, 5120, rows) for tp in (4, 8) for rows in DEFAULT_ROWS]
for _hidden, _rows in _SHAPES_TP2:
    _register(2, _hidden, _rows, "unfused", bt=True)
for _tp, _hidden, _rows in _SHAPES_TP4_TP8:
    _register(_tp, _hidden, _rows, "unfused", bt=False)
for _impl in ("ll", "bt", "finalize_ll", "finalize_bt"):
    for _hidden, _rows in _SHAPES_TP2:
        _register(2, _hidden, _rows, _impl, bt=True)
for _rows, _impl in ((1, "ll"), (128, "bt")):
    _register(2, 5120, _rows, _impl, bt=True, flight=False)
for _tp, _hidden, _rows in _SHAPES_TP4_TP8:
    _register(_tp, _hidden, _rows, "ll", bt=False)


def breakdown_flight(args) -> tuple[dict[int, list], list[float], int, str]:
    """``bench breakdown``'s measurement of the all-reduce: ``(records by rank, us per call of each replay, kernels
    per call, title)`` of the call at ``args.rows`` x ``args.hidden`` on ``args.world`` virtual ranks of this GPU,
    ``args.protocol`` forced (``harness.bench.flight_timeline.measure_flight``)."""
    from harness.bench.flight_timeline import measure_flight  # noqa: PLC0415 - the breakdown's, not the cases'

    device = torch.device("cuda", torch.cuda.current_device())
    ranks = _ranks(device, args.world, args.hidden, args.protocol == "bt")
    inputs = make_inputs(device, torch.Generator(device=device).manual_seed(args.rows), tp=args.world, rows=args.rows,
                         hidden=args.hidden)
    call_params = {"finalize": False, "protocol": args.protocol}
    records, per_call_us = measure_flight(
        ranks, lambda: launch_ranks(ranks, lambda rank, system: system.launch(inputs, call_params)),
        warmup=args.warmup, reps=args.reps)
    title = f"allreduce_mhc {args.protocol.upper()} world {args.world}, M {args.rows}, H {args.hidden}"
    return records, per_call_us, chain_launches(args.protocol), title


# ``bench breakdown`` times this family from its flight-recorder stamps (no stamped variant).
BREAKDOWN_FLIGHT = breakdown_flight
