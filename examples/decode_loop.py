"""A decode loop under torchrun through the kernels' public objects, recorded with ``rankcheck.recording``.

Run it under torchrun, one process per rank (ranks may share a GPU):

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/decode_loop.py --record /tmp/rec

Each rank builds the three public objects a serving engine holds, once,
collectively over the process group: an ``AllReduceMHC`` (the all-reduce
after attention), a ``ShardedMarkovSampler`` (seed 000's draft chain) and a
``MarkovKernels`` (seed 001's draft loop, vocab-parallel over the group
when the world is a power of two, around the caller's own bias GEMV). Each
decode step calls them in that order with the step's batch: its row count
changes from step to step as requests come and go (``ROWS``), and its
tensors come from seeded generators, identical on every rank where the
contract says so (the replicated mHC state, the request state) and
rank-dependent where it does not (each rank's all-reduce partial).

``--impl kernel`` runs the CuTe DSL kernels (a GPU; peer buffers from torch
symmetric memory, as ``examples/decode_step.py``); ``--impl golden`` the
golden stand-ins of the same classes (``golden.public``: the same
constructors and methods, computed on the CPU), exchanging over gloo
through ``rankcheck.golden_comm()``.

With ``--record DIR`` the objects are wrapped in ``rankcheck.recording({"ar":
..., "sampler": ..., "draft": ...}, DIR)`` (one changed line: the loop calls
the wrapped objects as it called the objects), and every rank writes its
recording however the loop ends: normally, on an exception, or on
SIGTERM/SIGINT (a job that hung and was killed). ``python -m harness replay
--bundle DIR --impl golden`` then replays it offline on the CPU and names
the object, rank and launch where the ranks' calls first differ.

``--desync-rank R`` plants a production-like bug: at step ``--desync-step``
(default 2) rank R's scheduler skips the step (an early ``continue`` on one
rank), so from then on R calls with the next step's batch while its peers
call with this one's. The golden ranks then meet in a mismatched exchange
and fail; the kernels exchange other rows, or wait until their deadline
(``--timeout-s``) and trap.

Exit 0 when the loop completed, 1 when it failed on this rank (the
recording is written and the error printed), 2 on bad arguments or
``--impl kernel`` without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # example_world beside it

# First: example_world sets the multicast-off environment before torch is loaded.
from example_world import join_world, public_class, world_group  # noqa: E402
import torch  # noqa: E402

OBJECTS = ("ar", "sampler", "draft")
BAD_ARGS_EXIT = 2
ROWS = (4, 2, 3, 1, 4, 2, 3, 1)  # the batch's rows at step s: ROWS[s % len(ROWS)]
HIDDEN, HC, TOP_K, MAX_ROWS, MAX_REQS = 1024, 4, 8, 8, 8
SAMPLER_STEPS, SAMPLER_VOCAB_PER_RANK = 4, 512
DRAFT_STEPS, DRAFT_VOCAB, DRAFT_DIM, DRAFT_BLOCK, QUERY = 4, 4096, 256, 1024, 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options, checked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=("kernel", "golden"), default="kernel",
                        help="kernel: the CuTe DSL kernels (a GPU); golden: the golden stand-ins (CPU, gloo)")
    parser.add_argument("--objects", nargs="+", choices=OBJECTS, default=list(OBJECTS),
                        help="which objects each step calls (ar: AllReduceMHC, sampler: ShardedMarkovSampler, "
                             "draft: MarkovKernels)")
    parser.add_argument("--steps", type=int, default=6, help="decode steps")
    parser.add_argument("--record", metavar="DIR", help="record every rank into DIR (rankcheck.recording)")
    parser.add_argument("--max-calls", type=int, default=64, help="calls kept per rank and object (the newest)")
    parser.add_argument("--desync-rank", type=int, help="this rank skips step --desync-step")
    parser.add_argument("--desync-step", type=int, default=2, help="the step it skips")
    parser.add_argument("--timeout-s", type=float, default=60.0,
                        help="the kernels' wait deadline and the process group's timeout (seconds)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.max_calls < 1 or args.timeout_s <= 0:
        parser.error("--steps and --max-calls must be >= 1 and --timeout-s > 0")
    if not 0 <= args.desync_step < args.steps - 1:
        parser.error(f"--desync-step must lie in 0..{args.steps - 2} (a step with one after it)")
    return args


def generator(seed: int, *salt: int) -> torch.Generator:
    """A CPU generator for one tensor, identical on every rank for the same salt."""
    return torch.Generator().manual_seed(hash((seed,) + salt) & 0x7FFFFFFF)


def public_classes(impl: str) -> tuple:
    """(AllReduceMHC, ShardedMarkovSampler, MarkovKernels) of ``impl``: the kernels or their golden stand-ins."""
    return tuple(public_class(name, impl) for name in ("AllReduceMHC", "ShardedMarkovSampler", "MarkovKernels"))


class DraftLoop:
    """The caller's seed-001 draft loop around ``MarkovKernels``: its own bias GEMV before each step.

    Vocab-parallel over ``group`` (``tp`` = the world, a power of two): each
    rank holds ``width = V / tp`` columns of ``w2``, its steps write packets
    that ``gather_packets`` / ``pick`` turn into the step's tokens, and
    ``gather_draft`` / ``cache_fill`` write every rank's draft logits into the
    cache; without a group (``tp`` None) the steps write the cache directly."""

    def __init__(self, kernels_class, w1, w2, *, group, tp: int | None, rank: int, device, timeout_ns: int) -> None:
        self.tp, self.width = tp, DRAFT_VOCAB // (tp or 1)
        self.vocab_offset = rank * self.width if tp else 0
        self.w2_shard = w2[self.vocab_offset: self.vocab_offset + self.width]
        self.device = device
        self.embeds = torch.zeros(MAX_ROWS, DRAFT_DIM, dtype=torch.bfloat16, device=device)
        self.embeds @ self.w2_shard.t()  # the GEMV's first use, before any exchange can wait on this rank
        exchange = dict(group=group, max_rows=MAX_ROWS, max_steps=DRAFT_STEPS) if tp else {}
        # Both access variants compiled now: a call picks by its pointers' alignment, and nothing compiles in a call.
        self.kernels = kernels_class(w1, self.embeds, width=self.width, has_cap=False, tp=tp,
                                     steps=[(DRAFT_BLOCK, True, vector) for vector in (False, True)],
                                     pick_pdl=True, fill_vector=(False, True),
                                     timeout_ns=timeout_ns, **exchange)

    def __call__(self, k, t: dict) -> None:
        """Draft ``DRAFT_STEPS`` tokens per row of the batch ``t`` through ``k`` (the object or its wrapper)."""
        rows, device = t["draft_base"].shape[0], self.device
        emb, arrivals = self.embeds[:rows], torch.empty(rows, dtype=torch.int32, device=device)
        tokens = torch.empty(rows, DRAFT_STEPS, dtype=torch.int64, device=device)
        blocks = -(-self.width // DRAFT_BLOCK)
        block_argmax = torch.empty(rows * blocks, dtype=torch.int64, device=device)
        block_max = torch.empty(rows * blocks, dtype=torch.float32, device=device)
        packets = torch.empty(rows, 4, dtype=torch.int32, device=device)
        draft = torch.empty(rows, DRAFT_STEPS, self.width, dtype=torch.bfloat16, device=device) if self.tp else None
        cache, idx_map = t["draft_cache"], t["draft_idx_map"]
        k.anchor_embed(t["draft_input_ids"], t["draft_anchor_idx"], emb, arrivals)
        for col in range(DRAFT_STEPS):
            bias = emb @ self.w2_shard.t()  # the caller's GEMV
            k.step(t["draft_base"][:, col], bias, draft if self.tp else cache, col, idx_map[:, col],
                   t["draft_pos"][:, col], t["draft_seeds"], t["temperature"], block_argmax, block_max, arrivals,
                   tokens, emb, packets, self.vocab_offset, 1.0, 1 / 30, 30.0, block=DRAFT_BLOCK, pdl=True)
            if self.tp:
                k.pick(k.gather_packets(packets, col), rows, tokens, col, emb)
        if self.tp:
            k.cache_fill(k.gather_draft(draft), rows * DRAFT_STEPS * self.width, cache, idx_map, rows,
                         DRAFT_STEPS, self.width, DRAFT_VOCAB)


def build_objects(args: argparse.Namespace, group, device, rank: int, world: int) -> tuple[dict, DraftLoop | None]:
    """The chosen public objects by name, in call order (the same on every rank), and the draft loop's driver."""
    all_reduce, sampler_class, kernels_class = public_classes(args.impl)
    placement = dict(device=device) if args.impl == "kernel" else {}
    objects: dict = {}
    if "ar" in args.objects:
        objects["ar"] = all_reduce(hidden_size=HIDDEN, hc_mult=HC, max_num_tokens=MAX_ROWS, top_k=TOP_K,
                                   group=group, timeout_ms=args.timeout_s * 1e3, **placement)
    if "sampler" in args.objects:
        vocab = SAMPLER_VOCAB_PER_RANK * world
        embed_table = (torch.randn(vocab, 256, generator=generator(args.seed, 20)) * 0.1).bfloat16().to(device)
        head = (torch.randn(vocab, 256, generator=generator(args.seed, 21)) * 0.1).bfloat16().to(device)
        sharing = 1
        if args.impl == "kernel":  # ranks sharing this GPU split its SMs: every rank's grid must be resident
            sharing = min(world, -(-int(os.environ.get("LOCAL_WORLD_SIZE", world)) // torch.cuda.device_count()))
        objects["sampler"] = sampler_class(embed_table, head, steps=SAMPLER_STEPS, max_rows=MAX_ROWS,
                                           max_reqs=MAX_REQS, group=group, timeout_ns=int(args.timeout_s * 1e9),
                                           ranks_per_device=sharing, **placement)
    loop = None
    if "draft" in args.objects:
        w1 = (torch.randn(DRAFT_VOCAB, DRAFT_DIM, generator=generator(args.seed, 30)) * 0.1).bfloat16().to(device)
        w2 = (torch.randn(DRAFT_VOCAB, DRAFT_DIM, generator=generator(args.seed, 31)) * 0.1).bfloat16().to(device)
        sharded = world > 1 and world & (world - 1) == 0  # the pick's butterfly needs a power of two
        loop = DraftLoop(kernels_class, w1, w2, group=group if sharded else None, tp=world if sharded else None,
                         rank=rank, device=device, timeout_ns=int(args.timeout_s * 1e9))
        objects["draft"] = loop.kernels
    return objects, loop


def batch(args: argparse.Namespace, step: int, rank: int, world: int, device) -> dict:
    """Step ``step``'s tensors for this rank: ``ROWS[step]`` rows, seeded by the step (and the rank for the
    all-reduce partial, the only input that differs by rank)."""
    m, vocab, s = ROWS[step % len(ROWS)], SAMPLER_VOCAB_PER_RANK * world, args.seed + 1000 * step

    def normal(shape, salt, dtype=torch.bfloat16, scale=1.0):
        """A seeded normal tensor."""
        return (torch.randn(shape, generator=generator(s, *salt)) * scale).to(dtype)

    uniform = torch.rand(m * SAMPLER_STEPS, vocab, generator=generator(s, 23)).clamp_(1e-6, 1 - 1e-6)
    t = {"x": normal((m, HIDDEN), (1, rank)), "residual": normal((m, HC, HIDDEN), (2,)),
         "post": normal((m, HC), (3,), torch.float32, 0.5), "comb": normal((m, HC, HC), (4,), torch.float32, 0.5),
         "pre": normal((m, HC), (5,), torch.float32, 0.5), "norm_weight": normal((HIDDEN,), (6,)),
         "input_ids": torch.randint(0, vocab, (m,), generator=generator(s, 22), dtype=torch.int32),
         "idx_mapping": torch.randperm(MAX_REQS, generator=generator(s, 25))[:m].repeat_interleave(SAMPLER_STEPS),
         "temperature": torch.tensor([0.0, 1.0, 0.5, 2.0] * 2, dtype=torch.float32),
         "noise": -torch.log(-torch.log(uniform)),
         "base_logits": normal((m, SAMPLER_STEPS, vocab), (24,)),
         "logits_cache": torch.zeros(MAX_REQS, SAMPLER_STEPS, vocab, dtype=torch.bfloat16),
         "draft_tokens": torch.empty(m, SAMPLER_STEPS, dtype=torch.int64),
         "draft_input_ids": torch.randint(0, DRAFT_VOCAB, (m * QUERY,), generator=generator(s, 32), dtype=torch.int32),
         "draft_anchor_idx": torch.arange(m, dtype=torch.int64) * QUERY + QUERY - 1,
         "draft_base": normal((m, DRAFT_STEPS, DRAFT_VOCAB), (33,)),
         "draft_idx_map": torch.arange(m, dtype=torch.int64)[:, None].repeat(1, DRAFT_STEPS),
         "draft_pos": torch.arange(m * DRAFT_STEPS, dtype=torch.int64).view(m, DRAFT_STEPS) + 100 + 8 * step,
         "draft_seeds": torch.arange(MAX_REQS, dtype=torch.int64) * 7919 + 1,
         "draft_cache": torch.zeros(MAX_REQS, DRAFT_STEPS, DRAFT_VOCAB, dtype=torch.bfloat16)}
    return {name: value.to(device) for name, value in t.items()}


def decode_step(objects, loop: DraftLoop | None, t: dict) -> None:
    """One decode step: the all-reduce after attention, then the speculators (each object the step has)."""
    if "ar" in objects:
        objects["ar"](t["x"], t["residual"], t["post"], t["comb"], t["pre"], t["norm_weight"], 1e-6, protocol="ll")
    if "sampler" in objects:
        objects["sampler"](t["base_logits"], t["input_ids"], 1, t["idx_mapping"], t["temperature"], t["noise"],
                           t["logits_cache"], t["draft_tokens"])
    if loop is not None:
        loop(objects["draft"], t)


def run_loop(objects, loop, args: argparse.Namespace, rank: int, world: int, device) -> None:
    """The decode loop; the planted rank skips its step (its later calls carry the next steps' batches)."""
    for step in range(args.steps):
        if rank == args.desync_rank and step == args.desync_step:
            continue  # the planted bug: this rank's scheduler skips the step
        decode_step(objects, loop, batch(args, step, rank, world, device))
    if args.impl == "kernel":
        torch.cuda.synchronize()  # a kernel that timed out and trapped raises here


def main(argv: list[str] | None = None) -> int:
    """Run the loop on this rank (recording when asked); exit 0 completed / 1 failed here / 2 bad arguments."""
    args = parse_args(argv)
    if args.impl == "kernel" and not torch.cuda.is_available():
        print("examples/decode_loop.py --impl kernel needs a CUDA GPU (torch finds none); --impl golden runs on "
              "the CPU", file=sys.stderr)
        return BAD_ARGS_EXIT
    import torch.distributed as dist

    import rankcheck

    device, rank, world = join_world(args.impl == "kernel", args.timeout_s, solo_port=29533)
    if args.desync_rank is not None and not 0 <= args.desync_rank < world:
        print(f"--desync-rank: expected a rank in 0..{world - 1}, got {args.desync_rank}", file=sys.stderr)
        return BAD_ARGS_EXIT
    try:
        group = world_group(args.impl, device)
        objects, loop = build_objects(args, group, device, rank, world)
        recording = (rankcheck.recording(objects, args.record, max_calls=args.max_calls) if args.record
                     else nullcontext(objects))
        with recording as wrapped:
            run_loop(wrapped, loop, args, rank, world, device)
    except Exception as exc:  # noqa: BLE001 - the recording is written; the error is this rank's verdict
        print(f"rank {rank}: decode loop failed: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
        return 1
    finally:
        if args.record:
            print(f"rank {rank}: recording in {args.record}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"decode loop: {args.steps} steps of {', '.join(objects)} on {world} rank(s), impl {args.impl}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
