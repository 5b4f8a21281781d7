"""Benchmark cases of seed 001's fused Markov draft loop (``harness.families.markov_fused.kernel.FusedMarkovLoop`` over ``kernels.markov_fused.host.MarkovKernels``).

Pairs of cases at rows R and steps S in {1, 8} x {1, 8}, vocab 129280,
dim 256, tp 1, timed by the runner in the same run (CUDA-graph replays and
eager launches, inputs rotated beyond the L2); the goals are judged at rows
8, steps 8:

- ``rR_sS_v129280_tp1``: the whole draft loop of the kernel system: anchor,
  per step the bias GEMV (``kernels.markov_fused.head_gemv.HeadGemv``: the head
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

``r8_s8_v129280_tp2`` and ``_tp4`` (outside the default set, registered
last so that a trap cannot take the tp 1 cases with it): the same loop
vocab-parallel on 2 or 4 virtual ranks of this GPU (``harness.bench.cases.virtual``; each
rank a ``1/tp`` shard of ``w2`` and of the vocabulary), per step HeadGemv,
step, the device exchange of the pick packets (``gather_packets``,
``kernels.markov_fused.exchange``) and the pick, then ``gather_draft`` and
``cache_fill``. Each input set carries one cache per rank and one CUDA graph
per rank holding that rank's whole loop, captured in the rank's thread
between two fabric barriers with ``capture_begin``/``capture_end``
(``torch.cuda.graph`` synchronizes the device, which would invalidate a
peer's capture; ``harness.rank.graphs``). A call forks from the current
stream to the rank streams, replays every rank's graph, and joins
(``launch_ranks``); such a call is not captured again by the runner
(``capturable`` False), so the runner's eager column is those replays and
its graph column repeats it. Virtual ranks share one GPU's SMs and exchange
through its L2 and DRAM: not a measurement of NVLink. Floor: the tp 1 terms
plus the draft shards read by every rank and every rank's cache written;
launches per rank ``3 + 4 steps`` (anchor; GEMV, step, packet gather, pick
per step; draft gather, cache fill). Sanity: an eager call on every rank (in
its thread) must give every rank the tokens and cache of rank 0, greedy
tokens and cache rows equal to the torch loop over ``HeadGemv`` (each bias
element is one row's dot product, so the shards' biases are the full bias's
columns), and pass the chain check; the first replay of the check set's
graphs must equal that eager call on every rank, bit for bit.
"""

from __future__ import annotations

import threading

import torch

from contracts.deadlines import BENCH_TIMEOUT_NS
from golden.markov_fused import mma_bias
from harness.bench.cases.checks import check_equal, check_markov_chain, tensor_bytes
from harness.bench.cases.virtual import build_ranks, launch_ranks
from harness.bench.floor import FloorTerm, terms_bytes
from harness.bench.registry import BenchContext, Prepared, bench_case

ROWS, STEPS, VOCAB, DIM, BLOCK = 8, 8, 129280, 256, 1024
GREEDY_ROWS = 4
TIMEOUT_NS = BENCH_TIMEOUT_NS  # a lost peer traps (with its diagnostic record) after 2 s
# Issue 16's goals at rows 8, steps 8.
GOAL = {"speedup_vs_eager": 5.5, "floor_ratio": 1.5}
TABLE_LAYOUT = "loop"  # the report pairs each kernel case with its eager torch loop (harness.bench.tables)
# One rank captures at a time: nothing runs during a capture, and no two threads enqueue into captures at once.
_CAPTURE_LOCK = threading.Lock()


def floor_terms(*, rows: int, steps: int, vocab: int, dim: int, tp: int = 1) -> tuple[FloorTerm, ...]:
    """What one call on ``tp`` ranks sharing this GPU must move (module docstring): ``w2`` per step, base, bias and
    cache once; sharded, also the draft shards written once and read by every rank, and every rank's cache."""
    cells = rows * steps * vocab
    size = f"{rows} x {steps} x {vocab} x 2 B"
    sharded = () if tp == 1 else (
        FloorTerm("draft shards (BF16) written once", size, cells * 2),
        FloorTerm("draft shards read by every rank", f"{tp} ranks x {size}", tp * cells * 2),
        FloorTerm("the other ranks' caches (BF16) written", f"{tp - 1} ranks x {size}", (tp - 1) * cells * 2),
    )
    return (
        FloorTerm("w2 read once per step (each step's GEMV needs the previous token)",
                  f"{steps} steps x {vocab} x {dim} x 2 B", steps * vocab * dim * 2),
        FloorTerm("base logits (BF16) read once", size, cells * 2),
        FloorTerm("bias (BF16) written once", size, cells * 2),
        FloorTerm("cache (BF16) written once", size, cells * 2),
        *sharded,
    )


def launches_per_call(steps: int, tp: int = 1) -> int:
    """Kernels of one call over every rank: the anchor, then the GEMV and the step kernel per step; sharded also
    the packet gather and the pick per step, then the draft gather and the cache fill."""
    return 1 + 2 * steps if tp == 1 else tp * (3 + 4 * steps)


def make_config(*, vocab: int, dim: int, max_reqs: int, tp: int = 1) -> dict:
    """The family config at ``tp`` (no soft cap, mult 1, the step with PDL; sharded, the exchange sized for the
    case with a short deadline)."""
    exchange = {} if tp == 1 else dict(max_rows=max_reqs, max_steps=STEPS, timeout_ns=TIMEOUT_NS)
    return dict(vocab=vocab, dim=dim, tp=tp, max_reqs=max_reqs, has_cap=False, mult=1.0, cap=30.0,
                inv_cap=1.0 / 30.0, block=BLOCK, pdl=True, **exchange)


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


def _rank_inputs(inputs: dict, rank: int) -> dict:
    """The call inputs rank ``rank`` launches with: the shared tensors and its own cache."""
    shared = {k: v for k, v in inputs.items() if k not in ("caches", "graphs")}
    return {**shared, "cache": inputs["caches"][rank]}


def _sharded_inputs(device: torch.device, gen: torch.Generator, *, rows: int, steps: int, tp: int) -> dict:
    """One call's inputs (``make_inputs``) with one cache per rank (``caches``) instead of one."""
    inputs = make_inputs(device, gen, rows=rows, steps=steps, vocab=VOCAB)
    cache = inputs.pop("cache")
    inputs["caches"] = [cache] + [torch.zeros_like(cache) for _ in range(tp - 1)]
    return inputs


def _capture_ranks(ranks: list, inputs: dict) -> dict:
    """``inputs`` with ``graphs``: per rank its whole loop on its inputs in one CUDA graph, captured in the rank's
    thread between two fabric barriers (``torch.cuda.graph`` would synchronize the device under a peer's capture)."""
    from kernels.fabric import VirtualFabric  # noqa: PLC0415 - loaded when the case runs, as the systems are

    torch.cuda.synchronize(ranks[0][0].device)
    systems = [system for _, system in ranks]

    def capture(fabric) -> torch.cuda.CUDAGraph:
        """Rank ``fabric.rank``'s loop captured on its stream (thread-local mode)."""
        graph = torch.cuda.CUDAGraph()
        fabric.barrier()
        with _CAPTURE_LOCK:
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                systems[fabric.rank].launch(_rank_inputs(inputs, fabric.rank))
            finally:
                graph.capture_end()
        fabric.barrier()
        return graph

    return {**inputs, "graphs": VirtualFabric.run([fabric for fabric, _ in ranks], capture)}


def _replay_ranks(ranks: list, inputs: dict) -> None:
    """One call: every rank's captured graph replayed on its stream, forked from and joined to the current one."""
    launch_ranks(ranks, lambda rank, _system: inputs["graphs"][rank].replay())


def _check_sharded(case: str, ranks: list, static: dict, check: dict, gemv) -> None:
    """An eager call on every rank (in its thread) checked against rank 0, the torch loop over ``gemv`` (greedy
    rows) and the chain check; then the first replay of ``check``'s graphs against that call, bit for bit."""
    from kernels.fabric import VirtualFabric  # noqa: PLC0415 - loaded when the case runs, as the systems are

    device = ranks[0][0].device
    systems = [system for _, system in ranks]
    eager = VirtualFabric.run([fabric for fabric, _ in ranks],
                              lambda fabric: systems[fabric.rank].launch(_rank_inputs(check, fabric.rank)))
    torch.cuda.synchronize(device)
    eager = [{k: out[k].clone() for k in ("tokens", "cache")} for out in eager]
    single = _rank_inputs(check, 0)
    torch_out = eager_loop(static, _clone(single), bias_fn=gemv)
    torch.cuda.synchronize(device)
    for rank, out in enumerate(eager):
        check_equal(case, f"rank {rank} tokens (vs rank 0)", out["tokens"], eager[0]["tokens"])
        check_equal(case, f"rank {rank} cache (vs rank 0)", out["cache"], eager[0]["cache"])
    check_equal(case, "greedy tokens (kernel vs eager)", eager[0]["tokens"][:GREEDY_ROWS], torch_out["tokens"][:GREEDY_ROWS])
    check_equal(case, "greedy cache rows (kernel vs eager)", eager[0]["cache"][:GREEDY_ROWS], torch_out["cache"][:GREEDY_ROWS])
    _chain_check(case, static, single, eager[0])
    for cache in check["caches"]:
        cache.zero_()
    _replay_ranks(ranks, _capture_ranks(ranks, check))
    torch.cuda.synchronize(device)
    for rank, cache in enumerate(check["caches"]):
        check_equal(case, f"rank {rank} cache (graph replay vs eager)", cache, eager[rank]["cache"])


def _sharded_setup(ctx: BenchContext, *, rows: int, steps: int, tp: int) -> Prepared:
    """The kernel loop on ``tp`` virtual ranks, each call a replay of every rank's graph, with a checked call first."""
    from harness.families.markov_fused.kernel import FusedMarkovLoop  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed
    from kernels.markov_fused.head_gemv import HeadGemv  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

    device = ctx.device
    static = make_static(device, vocab=VOCAB, dim=DIM)
    gemv = HeadGemv(DIM, device)
    config = make_config(vocab=VOCAB, dim=DIM, max_reqs=rows, tp=tp)
    ranks = build_ranks(tp, device, lambda fabric: FusedMarkovLoop(fabric, static, config, bias_fn=gemv))
    gen = torch.Generator(device=device).manual_seed(2)
    check = _sharded_inputs(device, gen, rows=rows, steps=steps, tp=tp)
    _check_sharded(f"markov_fused/kernel_r{rows}_s{steps}_tp{tp}", ranks, static, check, gemv)
    terms = floor_terms(rows=rows, steps=steps, vocab=VOCAB, dim=DIM, tp=tp)
    return Prepared(
        bytes_moved=terms_bytes(terms),
        floor_terms=terms,
        input_bytes=tensor_bytes({k: v for k, v in check.items() if k != "graphs"}),
        new_input_set=lambda: _capture_ranks(ranks, _sharded_inputs(device, gen, rows=rows, steps=steps, tp=tp)),
        launch=lambda inputs: _replay_ranks(ranks, inputs),
        kernels_per_call=launches_per_call(steps, tp),
        capturable=False,
    )


def _setup(ctx: BenchContext, *, fused: bool, rows: int, steps: int, flight: bool = True, tp: int = 1) -> Prepared:
    """The kernel loop (``fused``; with the flight recorder or without; at ``tp`` > 1 on virtual ranks) or the torch
    loop at ``rows`` x ``steps``, with a checked call first."""
    if tp > 1:
        return _sharded_setup(ctx, rows=rows, steps=steps, tp=tp)
    from harness.families.markov_fused.kernel import FusedMarkovLoop  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed
    from kernels.markov_fused.head_gemv import HeadGemv  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

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
        default=True,  # the recorder's cost is part of every default run
    )(lambda ctx: _setup(ctx, fused=True, rows=rows, steps=steps, flight=False))


def _register(rows: int, steps: int, tp: int = 1) -> None:
    """Register the kernel case at ``rows`` x ``steps`` and ``tp`` ranks (goals at rows 8, steps 8, tp 1); at tp 1
    also its eager baseline, which the sharded cases share (virtual ranks, outside the default set)."""
    params = {
        "rows": rows, "steps": steps, "vocab": VOCAB, "dim": DIM, "tp": tp, "block": BLOCK,
        "greedy_rows": min(rows, GREEDY_ROWS), "w2_reads_per_call": steps,
        "floor": "w2 once per step + base + bias + cache (BF16) + (1 + 2 steps) launches" if tp == 1 else
        f"w2 once per step + base + bias + draft written, read by {tp} ranks + {tp} caches (BF16) + "
        f"{tp} x (3 + 4 steps) launches",
    }
    name = f"r{rows}_s{steps}_v{VOCAB}_tp{tp}"
    eager = f"r{rows}_s{steps}_v{VOCAB}_tp1_eager"
    goal = {"goal": GOAL} if (rows, steps, tp) == (ROWS, STEPS, 1) else {}
    virtual = {} if tp == 1 else {
        "virtual_ranks": True,
        "timing": "each call replays every rank's CUDA graph of its whole loop (captured per rank); the runner "
                  "does not capture the replays, so its graph column repeats the eager one"}
    bench_case(
        "markov_fused", name,
        params={**params, "impl": "kernel", "baseline": eager, **goal, **virtual},
        description="FusedMarkovLoop: anchor + per step HeadGemv and step kernel, PDL (whole draft loop)" if tp == 1
        else f"FusedMarkovLoop on {tp} virtual ranks: per step HeadGemv, step, device packet gather, pick; draft "
             "gather, cache fill; one CUDA graph per rank (not an NVLink latency)",
        default=tp == 1,
    )(lambda ctx: _setup(ctx, fused=True, rows=rows, steps=steps, tp=tp))
    if tp > 1:
        return
    bench_case(
        "markov_fused", eager,
        params={**params, "impl": "eager torch loop"},
        description="torch loop: per step GEMV, add, output transform, cache index_copy, torch.rand Gumbel / argmax",
    )(lambda ctx: _setup(ctx, fused=False, rows=rows, steps=steps))


for _rows, _steps in ((ROWS, STEPS), (1, 1), (1, STEPS), (ROWS, 1)):
    _register(_rows, _steps)
_register_noflight(ROWS, STEPS)
# Last: a trap on a virtual rank ends the CUDA context, which must not take the tp 1 cases with it.
for _tp in (2, 4):
    _register(ROWS, STEPS, _tp)


def measure_stamped(*, rows: int, steps: int, vocab: int, warmup: int, reps: int, graph: bool):
    """``(stamp names, [call][rows * blocks][stamps], call times in us)`` of the stamped fused loop on this GPU."""
    from harness.families.markov_fused.kernel import FusedMarkovLoop  # noqa: PLC0415 - CuTe DSL: loaded when this breakdown runs, not at --help
    from kernels.markov_fused.head_gemv import HeadGemv  # noqa: PLC0415 - CuTe DSL: loaded when this breakdown runs, not at --help

    device = torch.device("cuda", torch.cuda.current_device())
    static = make_static(device, vocab=vocab, dim=DIM)
    loop = FusedMarkovLoop(None, static, make_config(vocab=vocab, dim=DIM, max_reqs=rows), stamps=True,
                           bias_fn=HeadGemv(DIM, device))
    inputs = make_inputs(device, torch.Generator(device=device).manual_seed(2), rows=rows, steps=steps, vocab=vocab)
    for _ in range(warmup):
        loop.launch(inputs)
    torch.cuda.synchronize(device)
    call = lambda: loop.launch(inputs)  # noqa: E731 - the eager call
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            loop.launch(inputs)
        call = captured.replay
        call()
        torch.cuda.synchronize(device)
    names, launches, call_us = (), [], []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        call()
        end.record()
        torch.cuda.synchronize(device)
        call_us.append(begin.elapsed_time(end) * 1e3)
        names, values = loop.stamps()
        launches.append(values.tolist())
    return names, launches, call_us


def breakdown_stamped(args, sizes: dict) -> tuple[list[str], list, list[float], str]:
    """``bench breakdown``'s run of the loop at tp 1: ``FusedMarkovLoop(..., stamps=True)`` with the bench's GEMV
    (``HeadGemv``) and PDL; thread 0 of every step CTA stamps its phases (``StepKernel``), a CTA slot ``(row,
    block)`` is followed through the steps, and ``between`` is the time from the slot's previous step to this one
    (the bias GEMV and the launches). Captured in a CUDA graph and replayed, as the bench times it (``--eager``:
    launched eagerly, host validation and launch latency included)."""
    return (*measure_stamped(graph=not args.eager, **sizes), "eager calls" if args.eager else "CUDA graph replays")


# ``bench breakdown`` times this family from its stamped variant, which runs at tp 1 only.
BREAKDOWN_STAMPED = breakdown_stamped
BREAKDOWN_MAX_WORLD = 1
