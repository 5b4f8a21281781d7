"""Benchmark cases of seed 000's sharded Markov sampler (``kernels.markov_sharded.host.ShardedMarkovSampler``).

Cases at rows 8, steps 8, vocab 129280 (BF16 base and cache, query 1 token
per row), timed by the runner in the same run:

- ``r8_s8_v129280_w1``: the kernel, one rank (one cooperative launch per call).
- ``r8_s8_v129280_w1_noflight``: the same without the flight recorder
  (``kernels.flight``; ``flight_cost_of`` names the case with it, and the
  run's line for this case shows the recorder's cost). In the default set,
  as every ``_noflight`` twin, so that ``make bench`` shows each family's
  time with and without the recorder.
- ``r8_s8_v129280_w8``: the kernel on 8 virtual ranks of this GPU (each an
  eighth of the head and of the SMs; forked onto the ranks' streams and
  joined per call, ``virtual.py``). Not a measurement of NVLink.
- ``r8_s8_v129280_eager``: the loop in torch ops, captured like the others:
  per step the GEMV ``embed @ head^T`` (BF16 matmul), the BF16 add of the
  base, the cache store (``index_copy_``), ``logits / T + noise`` (noise
  an input) or the greedy argmax, the next embedding.

Floor (``floor_terms``, the task's on one GPU, printed with its formula):
what must move through DRAM when ``world`` ranks share this GPU. The head
tiles that stay in registers for the whole launch (one 16-row tile per warp,
16 warps per CTA, ``default_ctas`` CTAs per rank: an equal share of the SMs)
are read once; the head rows that do not fit are read once per step; the
noise (FP32) and the base logits (BF16) once; every rank's cache rows
(BF16, each rank ends with the full rows) written once; and, with more than
one rank, the peers' shards through each rank's staging buffer, written by
the peers and read back by the copy into the cache (``logits_cache`` is the
caller's tensor, which a peer cannot address, so every peer shard lands in
the symmetric staging buffer first: seed 000's exchange). Plus one launch per
rank. The eager case has the one-rank floor: the task's limit, not cuBLAS's.
It is a DRAM floor: the kernel keeps half of the streamed rows in L2
between steps (``ShardedMarkovSample``'s ``l2_keep``), which is how it can
come closer to this floor than DRAM alone would allow.

Sanity, before timing (``checks.py``): rows 0-3 greedy, rows 4-7 sample at
temperature 1 (exact division), every row a distinct request. Each case's
own outputs pass the teacher-forced chain check (greedy tokens are the
first maximum of the cached logits, sampled tokens the first maximum of
logits + noise, exactly; the cached logits within a few BF16 roundings of
base + head . embed[previous]); with 8 ranks every rank's tokens and cache
equal rank 0's. Kernel and torch tokens are not compared with each other:
the kernel's BF16 MMA chain and cuBLAS may round a bias differently, after
which the chains legitimately diverge.
"""

from __future__ import annotations

import torch

from contracts.deadlines import BENCH_TIMEOUT_NS
from harness.bench.cases.checks import check_equal, check_markov_chain, tensor_bytes
from harness.bench.cases.virtual import build_ranks, launch_ranks
from harness.bench.floor import FloorTerm, terms_bytes
from harness.bench.registry import BenchContext, Prepared, bench_case

ROWS, STEPS, VOCAB, DIM = 8, 8, 129280, 256
GREEDY_ROWS = 4
TIMEOUT_NS = BENCH_TIMEOUT_NS  # a lost peer traps (with its diagnostic record) after 2 s, not 60
GOAL = {"speedup_vs_eager": 5.0, "floor_ratio": 1.5}
TABLE_LAYOUT = "loop"  # the report pairs each kernel case with its eager torch loop (harness.bench.tables)
PARAMS = {"query_per_row": 1}


def floor_terms(*, rows: int, steps: int, vocab: int, world: int, sm_count: int, sharing: int | None = None,
                dim: int = DIM) -> tuple[FloorTerm, ...]:
    """What one GPU holding ``sharing`` (default all ``world``) ranks must move per call (module docstring)."""
    from kernels.markov_sharded.layout import TILE_ROWS, WARPS, default_ctas  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

    sharing = world if sharing is None else sharing
    shard = vocab // world
    ctas = default_ctas(sm_count, sharing, shard)
    resident = min(shard, ctas * WARPS * TILE_ROWS)
    streamed = shard - resident
    cells = rows * steps * shard * sharing
    size = f"{rows} x {steps} x {shard * sharing}"
    staged = sharing * (world - 1) * rows * steps * shard * 2
    staged_size = f"{sharing} rank(s) x {world - 1} peers x {rows} x {steps} x {shard} x 2 B"
    return (
        FloorTerm("head tiles resident in registers, read once",
                  f"{sharing} rank(s) x min({shard}, {ctas} CTAs x {WARPS} warps x {TILE_ROWS} rows) x {dim} x 2 B",
                  sharing * resident * dim * 2),
        FloorTerm("head rows that do not fit, read every step",
                  f"{steps} steps x {sharing} rank(s) x {streamed} rows x {dim} x 2 B", steps * sharing * streamed * dim * 2),
        FloorTerm("noise (FP32) read once", f"{size} x 4 B", cells * 4),
        FloorTerm("base logits (BF16) read once", f"{size} x 2 B", cells * 2),
        FloorTerm("every rank's cache rows (BF16) written", f"{sharing} x {rows} x {steps} x {vocab} x 2 B",
                  sharing * rows * steps * vocab * 2),
        FloorTerm("the peers' shards written into every rank's staging buffer", staged_size, staged),
        FloorTerm("the staging buffers read by the copy into the cache", staged_size, staged),
    )


def sm_count(device: torch.device) -> int:
    """The SM count of ``device``."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def make_config(world: int) -> dict:
    """The family config at ``world`` (BF16 base and cache, full-vocabulary base)."""
    return dict(vocab=VOCAB, world=world, steps=STEPS, base_dtype="bfloat16", cache_dtype="bfloat16",
                max_rows=ROWS, max_reqs=ROWS, shard_only_base=False, timeout_ns=TIMEOUT_NS)


def make_static(device: torch.device, *, vocab: int = VOCAB, seed: int = 3) -> dict:
    """``embed_table``, ``head`` BF16 ``[V, 256]`` giving a bias of std about 1."""
    gen = torch.Generator(device=device).manual_seed(seed)
    scale = DIM**-0.25
    return {
        "embed_table": (torch.randn(vocab, DIM, device=device, generator=gen) * scale).to(torch.bfloat16),
        "head": (torch.randn(vocab, DIM, device=device, generator=gen) * scale).to(torch.bfloat16),
    }


def make_inputs(
    device: torch.device, gen: torch.Generator, world: int, *, rows: int = ROWS, steps: int = STEPS, vocab: int = VOCAB
) -> dict:
    """One call's inputs (row r is request r; rows below ``GREEDY_ROWS`` greedy, the others T = 1), with one
    cache per rank (each rank updates its own in place)."""
    temperature = torch.ones(rows, device=device)
    temperature[:GREEDY_ROWS] = 0.0
    uniform = torch.rand(rows * steps, vocab, device=device, generator=gen).clamp_(min=1e-20)
    return {
        "input_ids": torch.randint(0, vocab, (rows,), device=device, generator=gen, dtype=torch.int32),
        "idx_mapping": torch.arange(rows, device=device, dtype=torch.int64).repeat_interleave(steps),
        "temperature": temperature,
        "noise": -torch.log(-torch.log(uniform)),
        "base_logits": torch.randn(rows, steps, vocab, device=device, generator=gen).to(torch.bfloat16),
        "caches": [torch.zeros(rows, steps, vocab, device=device, dtype=torch.bfloat16) for _ in range(world)],
    }


def rank_inputs(inputs: dict, rank: int) -> dict:
    """The call inputs rank ``rank`` launches with (the shared tensors and its own cache)."""
    shared = {k: v for k, v in inputs.items() if k != "caches"}
    return {**shared, "logits_cache": inputs["caches"][rank]}


def eager_loop(static: dict, inputs: dict) -> dict:
    """The sampling loop in torch ops (capturable); writes ``caches[0]`` in place."""
    embed, head = static["embed_table"], static["head"]
    base, cache = inputs["base_logits"], inputs["caches"][0]
    rows, steps, vocab = base.shape
    requests = inputs["idx_mapping"].view(rows, steps)
    noise = inputs["noise"].view(rows, steps, vocab)
    emb = embed[inputs["input_ids"].long()]
    tokens = torch.empty(rows, steps, dtype=torch.int64, device=base.device)
    for step in range(steps):
        logits = base[:, step] + emb @ head.t()
        cache[:, step].index_copy_(0, requests[:, step], logits)
        temperature = inputs["temperature"][requests[:, step]]
        sampled = (logits.float() / temperature[:, None] + noise[:, step]).argmax(dim=-1)
        token = torch.where(temperature == 0, logits.float().argmax(dim=-1), sampled)
        tokens[:, step] = token
        emb = embed[token]
    return {"draft_tokens": tokens, "logits_cache": cache}


def chain_check(case: str, static: dict, inputs: dict, out: dict) -> None:
    """The teacher-forced chain check of one rank's outputs."""
    check_markov_chain(
        case, tokens=out["draft_tokens"], logits=out["logits_cache"], base=inputs["base_logits"],
        anchors=inputs["input_ids"].long(), table=static["embed_table"], head=static["head"],
        greedy=inputs["temperature"] == 0, noise=inputs["noise"].view(inputs["base_logits"].shape),
    )


def _kernel_setup(ctx: BenchContext, world: int, flight: bool = True) -> Prepared:
    """The kernel on ``world`` virtual ranks (with the flight recorder or without), with a checked call first."""
    from harness.families.markov_sharded.kernel import ShardedMarkovSystem  # noqa: PLC0415 - CuTe DSL: loaded when the case runs, not when cases are listed

    device = ctx.device
    static = make_static(device)
    ranks = build_ranks(world, device, lambda fabric: ShardedMarkovSystem(fabric, static, make_config(world),
                                                                          flight_recorder=flight))
    gen = torch.Generator(device=device).manual_seed(4)
    check = make_inputs(device, gen, world)
    case = f"markov_sharded/kernel_w{world}"

    def launch(inputs: dict) -> list:
        """One call: every rank's launch, forked and joined on the current stream."""
        return launch_ranks(ranks, lambda rank, system: system.launch(rank_inputs(inputs, rank), PARAMS))

    outputs = launch(check)
    torch.cuda.synchronize(device)
    chain_check(case, static, check, outputs[0])
    for rank, out in enumerate(outputs[1:], start=1):
        check_equal(case, f"rank {rank} draft_tokens", out["draft_tokens"], outputs[0]["draft_tokens"])
        check_equal(case, f"rank {rank} logits_cache", out["logits_cache"], outputs[0]["logits_cache"])
    terms = floor_terms(rows=ROWS, steps=STEPS, vocab=VOCAB, world=world, sm_count=sm_count(device))
    return Prepared(
        bytes_moved=terms_bytes(terms),
        input_bytes=tensor_bytes(check),
        new_input_set=lambda: make_inputs(device, gen, world),
        launch=launch,
        kernels_per_call=world,
        floor_terms=terms,
    )


def _eager_setup(ctx: BenchContext) -> Prepared:
    """The torch loop, with a checked call first."""
    device = ctx.device
    static = make_static(device)
    gen = torch.Generator(device=device).manual_seed(4)
    check = make_inputs(device, gen, 1)
    out = eager_loop(static, check)
    torch.cuda.synchronize(device)
    chain_check("markov_sharded/eager", static, check, out)
    terms = floor_terms(rows=ROWS, steps=STEPS, vocab=VOCAB, world=1, sm_count=sm_count(device))
    return Prepared(
        bytes_moved=terms_bytes(terms),
        input_bytes=tensor_bytes(check),
        new_input_set=lambda: make_inputs(device, gen, 1),
        launch=lambda inputs: eager_loop(static, inputs),
        kernels_per_call=1,
        floor_terms=terms,
    )


_BASE = f"r{ROWS}_s{STEPS}_v{VOCAB}"
_PARAMS = {"rows": ROWS, "steps": STEPS, "vocab": VOCAB, "dim": DIM, "greedy_rows": GREEDY_ROWS,
           "base_dtype": "bfloat16", "cache_dtype": "bfloat16"}

def _register_kernel(world: int, flight: bool = True) -> None:
    """Register the kernel case at ``world`` ranks, with the flight recorder (baseline: the torch loop) or
    without (``_noflight``; ``flight_cost_of``: the case with it)."""
    compared = {"baseline": f"{_BASE}_eager", "goal": GOAL} if flight else {"flight_cost_of": f"{_BASE}_w{world}"}
    bench_case(
        "markov_sharded", f"{_BASE}_w{world}" + ("" if flight else "_noflight"),
        params={**_PARAMS, "world": world, "impl": "kernel", **compared, "virtual_ranks": world > 1,
                "flight_recorder": flight},
        description=f"ShardedMarkovSampler, {world} rank(s) on one GPU"
        + (" (virtual ranks: not an NVLink latency)" if world > 1 else "")
        + ("" if flight else ", without the flight recorder"),
        default=True,  # the recorder's cost is part of every default run (issue 30)
    )(lambda ctx: _kernel_setup(ctx, world, flight))


# Order: the virtual 8-rank case last, so that a trap there (which ends the
# CUDA context) cannot take the one-rank and torch cases with it.
_register_kernel(1)
_register_kernel(1, flight=False)
bench_case(
    "markov_sharded", f"{_BASE}_eager",
    params={**_PARAMS, "world": 1, "impl": "eager torch loop"},
    description="torch loop: per step GEMV, add, cache index_copy, logits/T + noise or argmax",
)(_eager_setup)
_register_kernel(8)


def measure_stamped(*, world: int, rows: int, steps: int, vocab: int, warmup: int, reps: int):
    """``(stamp names, [launch][ctas][stamps], call times in us)`` of the stamped sampler on this GPU."""
    from kernels.markov_sharded.host import ShardedMarkovSampler  # noqa: PLC0415 - CuTe DSL: loaded when this breakdown runs, not at --help

    device = torch.device("cuda", torch.cuda.current_device())
    static = make_static(device, vocab=vocab)
    ranks = build_ranks(world, device, lambda fabric: ShardedMarkovSampler(
        static["embed_table"], static["head"], steps=steps, base_dtype="bfloat16", cache_dtype="bfloat16",
        max_rows=rows, max_reqs=rows, group=fabric, timeout_ns=TIMEOUT_NS, stamps=True))
    gen = torch.Generator(device=device).manual_seed(4)
    inputs = make_inputs(device, gen, world, rows=rows, steps=steps, vocab=vocab)
    tokens = [torch.empty(rows, steps, dtype=torch.int64, device=device) for _ in range(world)]

    def launch(rank: int, sampler) -> None:
        """Rank ``rank``'s launch on the case inputs."""
        sampler(inputs["base_logits"], inputs["input_ids"], PARAMS["query_per_row"], inputs["idx_mapping"],
                inputs["temperature"], inputs["noise"], inputs["caches"][rank], tokens[rank], rows)

    for _ in range(warmup):
        launch_ranks(ranks, launch)
    torch.cuda.synchronize(device)
    names, launches, call_us = (), [], []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        launch_ranks(ranks, launch)
        end.record()
        torch.cuda.synchronize(device)
        call_us.append(begin.elapsed_time(end) * 1e3)
        buffer = []
        for _, sampler in ranks:
            names, values = sampler.stamps()
            buffer.extend(values.tolist())
        launches.append(buffer)
    return names, launches, call_us


def breakdown_stamped(args, sizes: dict) -> tuple[list[str], list, list[float], str]:
    """``bench breakdown``'s run of the sampler: ``ShardedMarkovSampler(..., stamps=True)`` on ``args.world``
    virtual ranks of this GPU, thread 0 of every CTA stamping the end of each phase of the one cooperative kernel
    (``kernels/markov_sharded/kernel.py``); eager launches."""
    return (*measure_stamped(world=args.world, **sizes), "eager launches")


# ``bench breakdown`` times this family from its stamped variant.
BREAKDOWN_STAMPED = breakdown_stamped
