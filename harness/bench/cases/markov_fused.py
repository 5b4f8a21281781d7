"""Benchmark cases of seed 001's fused Markov draft loop (``harness.families.markov_fused_kernel.FusedMarkovLoop`` over ``kernels.markov.fused.MarkovKernels``).

Pairs of cases at rows R and steps S in {1, 8} x {1, 8}, vocab 129280,
dim 256, tp 1, timed by the runner in the same run (CUDA-graph replays and
eager launches, inputs rotated beyond the L2); the goals are judged at rows
8, steps 8:

- ``rR_sS_v129280_tp1``: the whole draft loop of the kernel system: anchor,
  per step the bias GEMV (``kernels.markov.head_gemv.HeadGemv``: the head
  streamed through shared memory, half of it kept in L2 between steps,
  PDL) and the step kernel (output transform, cache store, Gumbel or greedy
  pick, next embedding), the step launched with PDL.
- ``r8_s8_v129280_tp1_noflight``: the kernel case without the flight
  recorder (``kernels.flight``); ``flight_cost_of`` names the case with it.
- ``rR_sS_v129280_tp1_eager``: the same loop in torch ops: per step the
  GEMV, the add, the output transform (``* mult``, BF16), the cache store
  (``index_copy_``), Gumbel noise from ``torch.rand`` (``-log(-log(u))``,
  divided temperature) or the greedy argmax, and the next embedding.

Floor (``floor_terms``, both cases, the task's on one GPU, printed with its
formula): ``w2`` (``V x dim`` BF16) read once per step, since each step's
GEMV needs the previous step's token and ``w2`` (66 MB) exceeds the H200's
L2; the base logits read once; the bias (BF16 ``rows x V`` per step) written
once (the step reads it back from the L2, where ``rows x V x 2`` bytes fit);
the cache (``rows x steps x V`` BF16) written once; over the copy bandwidth
measured in the run, plus ``1 + 2 steps`` launches (anchor, then GEMV and
step per step). It is a DRAM floor: ``HeadGemv`` keeps about half of ``w2``
in L2 between steps, so the loop may come near it or, with one row, pass
it.

Sanity, before timing (``checks.py``): rows 0-3 are greedy (temperature 0),
the others sample at temperature 1. The kernel case checks ``HeadGemv``'s
bias of the check set's anchors against its golden bits
(``golden.markov_fused.mma_bias``), runs both loops on one check set, the
torch loop with that GEMV as its matmul, and requires equal greedy tokens
and equal greedy cache rows (bits: both take the same bias, and
``add.bf16`` equals torch's BF16 add), then the teacher-forced chain check;
the eager case runs the chain check on its own outputs.

tp 8 (virtual) is not registered: its per-step packet gather goes through
the fabric's host all-gather, a host round trip per step that is neither
capturable nor cheap.
"""

from __future__ import annotations

import torch

from golden.markov_fused import mma_bias
from harness.bench.cases.checks import check_equal, check_markov_chain, tensor_bytes
from harness.bench.floor import FloorTerm, terms_bytes
from harness.bench.registry import BenchContext, Prepared, bench_case

ROWS, STEPS, VOCAB, DIM, BLOCK = 8, 8, 129280, 256, 1024
GREEDY_ROWS = 4
# Issue 16's goals at rows 8, steps 8.
GOAL = {"speedup_vs_eager": 5.5, "floor_ratio": 1.5}


def floor_terms(*, rows: int, steps: int, vocab: int, dim: int) -> tuple[FloorTerm, ...]:
    """What one unsharded call must move (module docstring): ``w2`` per step, base, bias and cache once."""
    cells = rows * steps * vocab
    size = f"{rows} x {steps} x {vocab} x 2 B"
    return (
        FloorTerm("w2 read once per step (each step's GEMV needs the previous token)",
                  f"{steps} steps x {vocab} x {dim} x 2 B", steps * vocab * dim * 2),
        FloorTerm("base logits (BF16) read once", size, cells * 2),
        FloorTerm("bias (BF16) written once", size, cells * 2),
        FloorTerm("cache (BF16) written once", size, cells * 2),
    )


def launches_per_call(steps: int) -> int:
    """Kernels of one unsharded call: the anchor, then the GEMV and the step kernel per step."""
    return 1 + 2 * steps


def make_config(*, vocab: int, dim: int, max_reqs: int) -> dict:
    """The family config at tp 1 (no soft cap, mult 1, the step with PDL)."""
    return dict(vocab=vocab, dim=dim, tp=1, max_reqs=max_reqs, has_cap=False, mult=1.0, cap=30.0,
                inv_cap=1.0 / 30.0, block=BLOCK, pdl=True)


def make_static(device: torch.device, *, vocab: int, dim: int, seed: int = 1) -> dict:
    """``w1``, ``w2`` BF16 ``[V, dim]`` of unit-scale logits (bias std about 1)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    scale = dim**-0.25
    return {
        "w1": (torch.randn(vocab, dim, device=device, generator=gen) * scale).to(torch.bfloat16),
        "w2": (torch.randn(vocab, dim, device=device, generator=gen) * scale).to(torch.bfloat16),
    }


def make_inputs(device: torch.device, gen: torch.Generator, *, rows: int, steps: int, vocab: int) -> dict:
    """One call's inputs: row r is request r at every step; rows below ``GREEDY_ROWS`` greedy, the others T = 1."""
    query = 4
    temperature = torch.ones(rows, device=device)
    temperature[:GREEDY_ROWS] = 0.0
    return {
        "input_ids": torch.randint(0, vocab, (rows * query,), device=device, generator=gen, dtype=torch.int32),
        "anchor_idx": torch.arange(rows, device=device, dtype=torch.int64) * query + query - 1,
        "base": torch.randn(rows, steps, vocab, device=device, generator=gen).to(torch.bfloat16),
        "idx_map": torch.arange(rows, device=device, dtype=torch.int64)[:, None].repeat(1, steps),
        "pos": torch.randint(1, 1 << 20, (rows, steps), device=device, generator=gen, dtype=torch.int64),
        "seeds": torch.randint(0, 1 << 62, (rows,), device=device, generator=gen, dtype=torch.int64),
        "temperature": temperature,
        "cache": torch.zeros(rows, steps, vocab, device=device, dtype=torch.bfloat16),
    }


def torch_bias(emb: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """The GEMV of the torch loop: a BF16 matmul."""
    return emb @ w2.t()


def eager_loop(static: dict, inputs: dict, *, mult: float = 1.0, bias_fn=torch_bias) -> dict:
    """The draft loop in torch ops (capturable) with the GEMV ``bias_fn``; writes ``inputs["cache"]`` in
    place, returns tokens and cache."""
    w1, w2 = static["w1"], static["w2"]
    base, cache, idx_map = inputs["base"], inputs["cache"], inputs["idx_map"]
    rows, steps, vocab = base.shape
    anchor = inputs["input_ids"][inputs["anchor_idx"]].long().clamp_(0, vocab - 1)
    emb = w1[anchor]
    tokens = torch.empty(rows, steps, dtype=torch.int64, device=base.device)
    for step in range(steps):
        logits = ((base[:, step] + bias_fn(emb, w2)).float() * mult).to(torch.bfloat16)
        requests = idx_map[:, step]
        cache[:, step].index_copy_(0, requests, logits)
        temperature = inputs["temperature"][requests]
        greedy = logits.float().argmax(dim=-1)
        gumbel = -torch.log(-torch.log(torch.rand(rows, vocab, device=base.device).clamp_(min=1e-20)))
        sampled = (logits.float() / temperature[:, None] + gumbel).argmax(dim=-1)
        token = torch.where(temperature == 0, greedy, sampled)
        tokens[:, step] = token
        emb = w1[token]
    return {"tokens": tokens, "cache": cache}


def _chain_check(case: str, static: dict, inputs: dict, out: dict) -> None:
    """The teacher-forced chain check of one call's outputs (row r wrote request r)."""
    greedy = inputs["temperature"][inputs["idx_map"][:, 0]] == 0
    anchors = inputs["input_ids"][inputs["anchor_idx"]].long()
    check_markov_chain(case, tokens=out["tokens"], logits=out["cache"], base=inputs["base"], anchors=anchors,
                       table=static["w1"], head=static["w2"], greedy=greedy)


def _clone(inputs: dict) -> dict:
    """A copy of ``inputs`` whose cache is a fresh tensor (each loop writes its own)."""
    return {**inputs, "cache": inputs["cache"].clone()}


def _setup(ctx: BenchContext, *, fused: bool, rows: int, steps: int, flight: bool = True) -> Prepared:
    """The kernel loop (``fused``; with the flight recorder or without) or the torch loop at ``rows`` x ``steps``,
    with a checked call first."""
    from harness.families.markov_fused_kernel import FusedMarkovLoop  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed
    from kernels.markov.head_gemv import HeadGemv  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

    device = ctx.device
    static = make_static(device, vocab=VOCAB, dim=DIM)
    gen = torch.Generator(device=device).manual_seed(2)
    check = make_inputs(device, gen, rows=rows, steps=steps, vocab=VOCAB)
    case = f"markov_fused/{'kernel' if fused else 'eager'}_r{rows}_s{steps}"
    if fused:
        gemv = HeadGemv(DIM, device)
        anchors = static["w1"][check["input_ids"][check["anchor_idx"]].long()]
        check_equal(case, "HeadGemv bias of the anchors (kernel vs golden mma_bias)",
                    gemv(anchors, static["w2"]), mma_bias(anchors, static["w2"]))
        eager_out = eager_loop(static, _clone(check), bias_fn=gemv)
        system = FusedMarkovLoop(None, static, make_config(vocab=VOCAB, dim=DIM, max_reqs=rows), bias_fn=gemv,
                                 flight_recorder=flight)
        out = system.launch(_clone(check))
        torch.cuda.synchronize(device)
        check_equal(case, "greedy tokens (kernel vs eager)", out["tokens"][:GREEDY_ROWS], eager_out["tokens"][:GREEDY_ROWS])
        check_equal(case, "greedy cache rows (kernel vs eager)", out["cache"][:GREEDY_ROWS], eager_out["cache"][:GREEDY_ROWS])
        _chain_check(case, static, check, out)

        def launch(inputs: dict) -> None:
            """One call of the kernel loop on the current stream."""
            system.launch(inputs)

    else:
        eager_out = eager_loop(static, _clone(check))
        torch.cuda.synchronize(device)
        _chain_check(case, static, check, eager_out)

        def launch(inputs: dict) -> None:
            """One call of the torch loop on the current stream."""
            eager_loop(static, inputs)

    terms = floor_terms(rows=rows, steps=steps, vocab=VOCAB, dim=DIM)
    return Prepared(
        bytes_moved=terms_bytes(terms),
        floor_terms=terms,
        input_bytes=tensor_bytes(check),
        new_input_set=lambda: make_inputs(device, gen, rows=rows, steps=steps, vocab=VOCAB),
        launch=launch,
        kernels_per_call=launches_per_call(steps),
    )


def _register_noflight(rows: int, steps: int) -> None:
    """Register the kernel case at ``rows`` x ``steps`` without the flight recorder (``kernels.flight``);
    ``flight_cost_of`` names the case with it."""
    name = f"r{rows}_s{steps}_v{VOCAB}_tp1"
    bench_case(
        "markov_fused", f"{name}_noflight",
        params={"rows": rows, "steps": steps, "vocab": VOCAB, "dim": DIM, "tp": 1, "block": BLOCK, "impl": "kernel",
                "flight_cost_of": name, "flight_recorder": False},
        description="FusedMarkovLoop as the kernel case, without the flight recorder",
        default=False,
    )(lambda ctx: _setup(ctx, fused=True, rows=rows, steps=steps, flight=False))


def _register(rows: int, steps: int) -> None:
    """Register the kernel case and its eager baseline at ``rows`` x ``steps`` (goals at rows 8, steps 8)."""
    params = {
        "rows": rows, "steps": steps, "vocab": VOCAB, "dim": DIM, "tp": 1, "block": BLOCK,
        "greedy_rows": min(rows, GREEDY_ROWS), "w2_reads_per_call": steps,
        "floor": "w2 once per step + base + bias + cache (BF16) + (1 + 2 steps) launches",
    }
    name = f"r{rows}_s{steps}_v{VOCAB}_tp1"
    goal = {"goal": GOAL} if (rows, steps) == (ROWS, STEPS) else {}
    bench_case(
        "markov_fused", name,
        params={**params, "impl": "kernel", "baseline": f"{name}_eager", **goal},
        description="FusedMarkovLoop: anchor + per step HeadGemv and step kernel, PDL (whole draft loop)",
    )(lambda ctx: _setup(ctx, fused=True, rows=rows, steps=steps))
    bench_case(
        "markov_fused", f"{name}_eager",
        params={**params, "impl": "eager torch loop"},
        description="torch loop: per step GEMV, add, output transform, cache index_copy, torch.rand Gumbel / argmax",
    )(lambda ctx: _setup(ctx, fused=False, rows=rows, steps=steps))


for _rows, _steps in ((ROWS, STEPS), (1, 1), (1, STEPS), (ROWS, 1)):
    _register(_rows, _steps)
_register_noflight(ROWS, STEPS)
