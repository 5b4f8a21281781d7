"""One decode step through the kernels' public API, the way a serving engine calls them; eager, then in a CUDA graph.

Run it under torchrun, one process per rank:

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/decode_step.py

Processes share GPUs when there are fewer GPUs than ranks (rank k takes GPU
``LOCAL_RANK % device_count``); the same command runs unchanged on a node
with a GPU per rank. The process group is gloo (it works with ranks sharing a
GPU, where NCCL refuses) and the kernels' peer buffers come from torch
symmetric memory: each public constructor is collective over the group
(``group=``), here one ``kernels.fabric.SymmetricFabric`` made from it and
shared by the three families. NVLink multicast stays off
(``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``,
``NVSHMEM_DISABLE_NVLS=1``), and ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``
lets ranks of one GPU map each other's buffers; all four are set here
unless the environment sets them.

Per family (``--family``, default all: each runs its public classes,
``harness.recording.targets.FAMILY_CLASSES``), every rank builds its inputs
from a seed (identical on every rank where the contract says so,
rank-dependent TP partials otherwise), calls the public API once eagerly,
then captures the same call into a CUDA graph, replays it on the same input
buffers and compares the replay's outputs with the eager ones bit for bit;
per public class:

- ``AllReduceMHC`` (seed 004): ``__call__`` and ``finalize`` on this rank's
  TP partials.
- ``ShardedMarkovSampler`` (seed 000): ``__call__``, the draft tokens and
  the cache written in place.
- ``MarkovKernels`` (seed 001): the caller's draft loop around its own GEMV,
  ``MarkovKernels.anchor_embed`` / ``step`` and, vocab-parallel over the
  group, ``gather_packets`` / ``pick`` per step and ``gather_draft`` /
  ``cache_fill`` after the loop (the gathers run on the device through the
  fabric's peer buffers): at tp > 1 the whole loop is captured in one graph
  per rank and its replays are compared with the eager loop; each rank's
  unsharded loop is captured too.

Rank 0 prints one line per check and the table's verdict; the exit status is
0 when every rank's replays equal its eager bits, 1 otherwise, 2 on a machine
without a GPU (or bad arguments). ``--json PATH`` also writes the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # example_world beside it

# First: example_world sets the multicast-off environment before torch is loaded.
from example_world import join_world, world_group  # noqa: E402
import torch  # noqa: E402

from golden.families import FAMILIES  # noqa: E402 - the one list of families, found from their folders
from harness.rank.graphs import capture  # noqa: E402 - the harness's own: on a side stream, thread-local mode
from harness.recording.targets import FAMILY_CLASSES, public_type  # noqa: E402 - the public classes, by name
NO_GPU_EXIT = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=FAMILIES + ("all",), default="all", help="which family to run")
    parser.add_argument("--rows", type=int, default=4, help="request rows / tokens of the decode step (1..8)")
    parser.add_argument("--replays", type=int, default=3, help="graph replays compared with the eager call")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", metavar="PATH", help="rank 0 also writes the table here")
    args = parser.parse_args(argv)
    if not 1 <= args.rows <= 8:
        parser.error(f"--rows must lie in 1..8, got {args.rows}")
    if args.replays < 1:
        parser.error(f"--replays must be >= 1, got {args.replays}")
    return args


def generator(seed: int, *salt: int) -> torch.Generator:
    """A CPU generator for one tensor, identical on every rank for the same salt."""
    return torch.Generator().manual_seed(hash((seed,) + salt) & 0x7FFFFFFF)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same bytes (NaN payloads included)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def compare(rows: list, family: str, mode: str, eager: dict, replayed: dict) -> None:
    """One table row per output: whether the replay's bits equal the eager call's."""
    torch.cuda.synchronize()
    for name, value in eager.items():
        rows.append({"family": family, "mode": mode, "output": name, "shape": list(value.shape),
                     "equal": same_bits(value, replayed[name])})


# ----------------------------------------------------------------------------- AllReduceMHC (seed 004)


def run_all_reduce(fabric, args, device, rows: list, family: str) -> None:
    """``AllReduceMHC.__call__`` and ``finalize``: eager, then graph replays on the same inputs."""
    AllReduceMHC = public_type("AllReduceMHC", "kernel")
    hidden, hc, top_k, tp, rank, m = 1024, 4, 8, fabric.world, fabric.rank, args.rows
    layer = AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=8, top_k=top_k, device=device,
                         group=fabric)

    def tensor(shape, salt, dtype=torch.bfloat16, scale=1.0):
        """A seeded normal tensor on the device (the same on every rank unless ``salt`` holds the rank)."""
        return (torch.randn(shape, generator=generator(args.seed, *salt)) * scale).to(dtype).to(device)

    x = tensor((m, hidden), (1, rank))  # this rank's TP partial
    residual = tensor((m, hc, hidden), (2,))
    post = tensor((m, hc), (3,), torch.float32, 0.5)
    comb = tensor((m, hc, hc), (4,), torch.float32, 0.5)
    pre = tensor((m, hc), (5,), torch.float32, 0.5)
    norm_weight = tensor((hidden,), (6,))
    routed = 6
    gemm2 = tensor((routed, hidden), (7, rank))
    weights = tensor((m, top_k), (8,), torch.float32, 0.25)
    routes = torch.randint(-1, routed, (m, top_k), generator=generator(args.seed, 9, rank), dtype=torch.int32)
    routes = routes.to(device)  # -1: an expert this rank does not hold
    shared = tensor((m, hidden), (10, rank))
    eps = 1e-6

    def step():
        """The decode step's two boundaries: after attention (``__call__``) and after the MoE (``finalize``)."""
        streams, layer_input = layer(x, residual, post, comb, pre, norm_weight, eps)
        moe_streams, moe_input = layer.finalize(gemm2, weights, routes, shared, residual, post, comb, pre,
                                                norm_weight, eps)
        return {"residual_out": streams, "layer_input": layer_input, "finalize.residual_out": moe_streams,
                "finalize.layer_input": moe_input}

    eager = {k: v.clone() for k, v in step().items()}
    graph, outputs = capture(step)
    for replay in range(args.replays):
        graph.replay()
        compare(rows, family, f"graph replay {replay}", eager, outputs)


# ----------------------------------------------------------------------------- ShardedMarkovSampler (seed 000)


def run_sampler(fabric, args, device, rows: list, family: str) -> None:
    """``ShardedMarkovSampler.__call__`` on the caller's tensors: eager, then graph replays."""
    ShardedMarkovSampler = public_type("ShardedMarkovSampler", "kernel")
    # One 16-row head tile per warp of every rank: the vocabulary is a multiple of 16 * world.
    vocab, steps, max_reqs, m = 512 * fabric.world, 4, 8, args.rows
    embed_table = (torch.randn(vocab, 256, generator=generator(args.seed, 20)) * 0.1).bfloat16().to(device)
    head = (torch.randn(vocab, 256, generator=generator(args.seed, 21)) * 0.1).bfloat16().to(device)
    # Ranks sharing this GPU split its SMs: every rank's grid must be resident at once.
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", fabric.world))
    sharing = min(fabric.world, -(-local_ranks // torch.cuda.device_count()))
    sampler = ShardedMarkovSampler(embed_table, head, steps=steps, max_rows=8, max_reqs=max_reqs, group=fabric,
                                   device=device, ranks_per_device=sharing)
    input_ids = torch.randint(0, vocab, (m,), generator=generator(args.seed, 22), dtype=torch.int32).to(device)
    idx_mapping = torch.arange(m, dtype=torch.int64).repeat_interleave(steps).to(device)  # row r -> request r
    temperature = torch.tensor([0.0, 1.0, 0.5, 2.0] * 2, dtype=torch.float32).to(device)
    uniform = torch.rand(m * steps, vocab, generator=generator(args.seed, 23)).clamp_(1e-6, 1 - 1e-6)
    noise = (-torch.log(-torch.log(uniform))).to(device)
    base_logits = torch.randn(m, steps, vocab, generator=generator(args.seed, 24)).bfloat16().to(device)
    logits_cache = torch.zeros(max_reqs, steps, vocab, dtype=torch.bfloat16, device=device)
    draft_tokens = torch.empty(m, steps, dtype=torch.int64, device=device)

    def step():
        """One speculator step: the chain writes the draft tokens and the cache in place."""
        sampler(base_logits, input_ids, 1, idx_mapping, temperature, noise, logits_cache, draft_tokens)
        return {"draft_tokens": draft_tokens, "logits_cache": logits_cache}

    eager = {k: v.clone() for k, v in step().items()}
    graph, outputs = capture(step)
    for replay in range(args.replays):
        logits_cache.zero_()
        graph.replay()
        compare(rows, family, f"graph replay {replay}", eager, outputs)


# ----------------------------------------------------------------------------- MarkovKernels (seed 001)


class DraftLoop:
    """The caller's draft loop of seed 001: its own GEMV each step around the public ``MarkovKernels``.

    Every buffer is allocated once (fixed pointers for a CUDA graph); with
    ``fabric`` the vocabulary is sharded over its ranks and the packets and
    draft logits are gathered on the device through it (``MarkovKernels``
    built with ``group=fabric``), so the whole loop can be captured."""

    def __init__(self, w1, w2, *, rows: int, steps: int, max_reqs: int, block: int, fabric=None) -> None:
        MarkovKernels = public_type("MarkovKernels", "kernel")
        vocab, dim = w1.shape
        tp, rank = (fabric.world, fabric.rank) if fabric is not None else (1, 0)
        self.fabric, self.rows, self.steps, self.block = fabric, rows, steps, block
        self.vocab, self.width = vocab, vocab // tp
        self.vocab_offset = rank * self.width
        self.w2_shard = w2[self.vocab_offset: self.vocab_offset + self.width]
        device = w1.device
        self.emb = torch.empty(rows, dim, dtype=torch.bfloat16, device=device)
        self.arrivals = torch.empty(rows, dtype=torch.int32, device=device)
        self.tokens = torch.empty(rows, steps, dtype=torch.int64, device=device)
        blocks = -(-self.width // block)
        self.block_argmax = torch.empty(rows * blocks, dtype=torch.int64, device=device)
        self.block_max = torch.empty(rows * blocks, dtype=torch.float32, device=device)
        self.packets = torch.empty(rows, 4, dtype=torch.int32, device=device)
        self.draft = torch.empty(rows, steps, self.width, dtype=torch.bfloat16, device=device) if fabric else None
        # The GEMV's first use (cuBLAS handle, its kernels loaded) before any exchange can wait on this rank.
        self.emb.zero_()
        self.emb @ self.w2_shard.t()
        # Both access variants compiled now (a call picks by its pointers' alignment): the example's block, 1024,
        # moves 16 bytes a thread, so it has a vector variant.
        vectors = (False, True)
        exchange = dict(group=fabric, max_rows=rows, max_steps=steps) if fabric is not None else {}
        self.kernels = MarkovKernels(w1, self.emb, width=self.width, has_cap=False,
                                     tp=tp if fabric is not None else None,
                                     steps=[(block, True, v) for v in vectors], pick_pdl=True,
                                     fill_vector=(False, True), **exchange)

    def __call__(self, inputs: dict) -> dict:
        """Draft ``steps`` tokens per row; the cache rows of ``idx_map`` are written in place."""
        k, cache, idx_map = self.kernels, inputs["cache"], inputs["idx_map"]
        k.anchor_embed(inputs["input_ids"], inputs["anchor_idx"], self.emb, self.arrivals)
        for col in range(self.steps):
            bias = self.emb @ self.w2_shard.t()  # the caller's GEMV
            k.step(inputs["base"][:, col], bias, self.draft if self.fabric else cache, col, idx_map[:, col],
                   inputs["pos"][:, col], inputs["seeds"], inputs["temperature"], self.block_argmax,
                   self.block_max, self.arrivals, self.tokens, self.emb, self.packets, self.vocab_offset,
                   1.0, 1 / 30, 30.0, block=self.block, pdl=True)
            if self.fabric is not None:
                k.pick(k.gather_packets(self.packets, col), self.rows, self.tokens, col, self.emb)
        if self.fabric is not None:
            k.cache_fill(k.gather_draft(self.draft), self.rows * self.steps * self.width, cache, idx_map,
                         self.rows, self.steps, self.width, self.vocab)
        return {"tokens": self.tokens, "cache": cache, "emb": self.emb}


def run_draft_loop(fabric, args, device, rows: list, family: str) -> None:
    """The caller's draft loop: vocab-parallel over the group and each rank's own loop, eager then in a graph."""
    vocab, dim, steps, max_reqs, m = 4096, 256, 4, 8, args.rows
    w1 = (torch.randn(vocab, dim, generator=generator(args.seed, 30)) * 0.1).bfloat16().to(device)
    w2 = (torch.randn(vocab, dim, generator=generator(args.seed, 31)) * 0.1).bfloat16().to(device)
    query = 4
    inputs = {
        "input_ids": torch.randint(0, vocab, (m * query,), generator=generator(args.seed, 32), dtype=torch.int32),
        "anchor_idx": torch.arange(m, dtype=torch.int64) * query + query - 1,
        "base": torch.randn(m, steps, vocab, generator=generator(args.seed, 33)).bfloat16(),
        "idx_map": torch.arange(m, dtype=torch.int64)[:, None].repeat(1, steps),
        "pos": torch.arange(m * steps, dtype=torch.int64).view(m, steps) + 100,
        "seeds": torch.arange(max_reqs, dtype=torch.int64) * 7919 + 1,
        "temperature": torch.tensor([0.0, 1.0, 0.5, 2.0] * 2, dtype=torch.float32),
        "cache": torch.zeros(max_reqs, steps, vocab, dtype=torch.bfloat16),
    }
    inputs = {k: v.to(device) for k, v in inputs.items()}
    fresh_cache = inputs["cache"].clone()
    world = fabric.world
    loops = []
    if world & (world - 1) == 0 and world <= 32:  # the pick's butterfly needs a power of two
        loops.append((f"tp {world} sharded", DraftLoop(w1, w2, rows=m, steps=steps, max_reqs=max_reqs, block=1024,
                                                       fabric=fabric)))
    loops.append(("tp 1", DraftLoop(w1, w2, rows=m, steps=steps, max_reqs=max_reqs, block=1024)))
    for name, loop in loops:
        inputs["cache"].copy_(fresh_cache)
        eager = {k: v.clone() for k, v in loop(inputs).items()}
        torch.cuda.synchronize()
        graph, outputs = capture(lambda loop=loop: loop(inputs))
        # No rank replays (and waits in an exchange) before every rank captured.
        fabric.barrier()
        for replay in range(args.replays):
            inputs["cache"].copy_(fresh_cache)
            graph.replay()
            compare(rows, family, f"{name} graph replay {replay}", eager, outputs)


# Each public class's runner; a family runs those of its classes.
RUNNERS = {"AllReduceMHC": run_all_reduce, "ShardedMarkovSampler": run_sampler, "MarkovKernels": run_draft_loop}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen families on this rank; rank 0 prints the table. Exit 0 / 1 (a mismatch) / 2 (no GPU)."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("examples/decode_step.py needs a CUDA GPU (torch finds none); run it on a GPU machine under torchrun",
              file=sys.stderr)
        return NO_GPU_EXIT
    import torch.distributed as dist

    device, _, _ = join_world(True, 300, solo_port=29531)
    try:
        fabric = world_group("kernel", device)
        rows: list = []
        for family in FAMILIES if args.family == "all" else (args.family,):
            for public in FAMILY_CLASSES.get(family, ()):
                RUNNERS[public.name](fabric, args, device, rows, family)
        bad = torch.tensor([sum(not r["equal"] for r in rows)], dtype=torch.int64)
        dist.all_reduce(bad)
        if fabric.rank == 0:
            print(f"decode step on {fabric.world} rank(s), {torch.cuda.get_device_name(device)}, "
                  f"{torch.cuda.device_count()} GPU(s)")
            print(f"{'family':<16}{'mode':<24}{'output':<24}{'shape':<20}replay == eager (rank 0)")
            for r in rows:
                print(f"{r['family']:<16}{r['mode']:<24}{r['output']:<24}{str(r['shape']):<20}"
                      f"{'yes' if r['equal'] else 'NO'}")
            print(f"{int(bad)} mismatching output(s) over all ranks")
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump({"world": fabric.world, "device": torch.cuda.get_device_name(device),
                               "rank0": rows, "mismatches_all_ranks": int(bad)}, fh, indent=1)
        fabric.barrier()
        return 0 if int(bad) == 0 else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
