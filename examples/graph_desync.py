"""A decode step captured in a CUDA graph, one rank replaying it once fewer: the flight recorder names that rank.

Run it under torchrun, one process per rank (ranks may share one GPU), then
read the rings it leaves:

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/graph_desync.py \\
        --desync-rank 1 --flight-dir /tmp/rankcheck-flight
    python3 -m harness flight /tmp/rankcheck-flight

What it shows. Each rank builds the decode step a serving engine runs
between two layers, through the kernels' public API only: an
``AllReduceMHC`` (the all-reduce after attention, fused with the mHC
post-mix and RMSNorm; LL protocol) and a ``ShardedMarkovSampler`` (the
speculator's draft chain), in that order, both collective over the
process group (peer buffers from torch symmetric memory), with short wait
deadlines (``--timeout-s``, default 5 s: ``AllReduceMHC(timeout_ms=)``,
``ShardedMarkovSampler(timeout_ns=)``) and their flight-recorder rings in
``--flight-dir``. Every rank runs the step once eagerly (step 0, the
warm-up), captures it into one CUDA graph, meets the others at a barrier,
and replays the graph ``--replays`` times (steps 1..K). With
``--desync-rank R`` rank R replays it once fewer (it skips step K, the
last): every other rank's all-reduce of step K publishes and then waits
for R's contribution, which never comes; at the deadline its kernel writes
its ``kernels.diag`` record and traps, that rank's CUDA context ends and
its process fails, and torchrun ends the job (a non-zero exit is what this
run is for). No Python code ran during the replays and the trapped ranks
could not dump anything, yet every instance's ring (written by its kernels
into host-mapped files, replays included) survives, and ``rankcheck
flight DIR`` names, from the rings alone, rank R and the launch it never
began: the all-reduce's publish of step K, launch ``2 K`` of the
all-reduce's instance (``<family>.0``, the ring's name: the family and
the instance's ordinal in the job; an LL call is two launches, publish and
consumer: launches ``2 s`` and ``2 s + 1`` at step ``s``).

The same loop eagerly, recorded (``--eager --record DIR``): the step is
called K + 1 times without a graph, the objects wrapped in
``rankcheck.recording({"ar": ..., "sampler": ...}, DIR)``, rank R skipping
step K. The instances, their order and every launch are the same as in
the graph run, so the offline replay on the CPU,

    python3 -m harness replay --bundle DIR --impl golden

names the same rank and launch from the recorded calls as the flight
recorder did from the rings. ``--impl golden`` (with ``--eager``) runs the
loop on the CPU with the golden stand-ins (``golden.public``, the same
classes and methods over ``rankcheck.golden_comm()``, gloo).

Exit 0 when this rank's loop and the closing barrier completed, 1 when
they failed (the error printed: a trapped kernel, a peer gone), 2 on bad
arguments, a flight directory that already holds rings, or ``--impl
kernel`` without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # example_world beside it

# First: example_world sets the multicast-off environment before torch is loaded.
from example_world import join_world, public_class, world_group  # noqa: E402
import torch  # noqa: E402

from harness.rank.graphs import capture  # noqa: E402 - the harness's own: on a side stream, thread-local mode

BAD_ARGS_EXIT = 2
HIDDEN, HC, TOP_K, MAX_TOKENS = 1024, 4, 8, 8
STEPS, MAX_REQS, VOCAB_PER_RANK = 4, 8, 512


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options, checked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=("kernel", "golden"), default="kernel",
                        help="kernel: the CuTe DSL kernels (a GPU); golden: the golden stand-ins on the CPU (--eager)")
    parser.add_argument("--eager", action="store_true", help="call the step eagerly instead of replaying a graph")
    parser.add_argument("--replays", type=int, default=4, help="K: decode steps after the warm-up (graph replays)")
    parser.add_argument("--desync-rank", type=int, help="this rank skips the last step (replays once fewer)")
    parser.add_argument("--rows", type=int, default=4, help="tokens / request rows of the step (1..8)")
    parser.add_argument("--timeout-s", type=float, default=5.0, help="the kernels' wait deadline (seconds)")
    parser.add_argument("--pg-timeout-s", type=float, default=60.0, help="the gloo process group's timeout (seconds)")
    parser.add_argument("--flight-dir", metavar="DIR", help="every rank's flight-recorder rings go here "
                        "(default: kernels.flight.default_directory(), one per torchrun job)")
    parser.add_argument("--record", metavar="DIR", help="with --eager: record every rank (rankcheck.recording)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    if args.replays < 1 or not 1 <= args.rows <= MAX_TOKENS or args.timeout_s <= 0 or args.pg_timeout_s <= 0:
        parser.error(f"--replays >= 1, --rows in 1..{MAX_TOKENS}, --timeout-s and --pg-timeout-s > 0")
    if args.record and not args.eager:
        parser.error("--record needs --eager (a call under graph capture is not a call the recording can replay)")
    if args.impl == "golden" and not args.eager:
        parser.error("--impl golden needs --eager (the golden stand-ins compute on the CPU: nothing to capture)")
    return args


def generator(seed: int, *salt: int) -> torch.Generator:
    """A CPU generator for one tensor, identical on every rank for the same salt."""
    return torch.Generator().manual_seed(hash((seed,) + salt) & 0x7FFFFFFF)


def build_objects(impl: str, group, device, args: argparse.Namespace, world: int) -> dict:
    """The step's public objects, in launch order (the same on every rank, so their rings are named alike)."""
    AllReduceMHC, ShardedMarkovSampler = (public_class(name, impl) for name in ("AllReduceMHC", "ShardedMarkovSampler"))
    placement = dict(device=device, flight_dir=args.flight_dir)
    ar = AllReduceMHC(hidden_size=HIDDEN, hc_mult=HC, max_num_tokens=MAX_TOKENS, top_k=TOP_K, group=group,
                      timeout_ms=args.timeout_s * 1e3, **placement)
    vocab = VOCAB_PER_RANK * world
    embed_table = (torch.randn(vocab, 256, generator=generator(args.seed, 20)) * 0.1).bfloat16().to(device)
    head = (torch.randn(vocab, 256, generator=generator(args.seed, 21)) * 0.1).bfloat16().to(device)
    sharing = 1
    if impl == "kernel":  # ranks sharing this GPU split its SMs: every rank's grid must be resident at once
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        sharing = min(world, -(-local_ranks // torch.cuda.device_count()))
    sampler = ShardedMarkovSampler(embed_table, head, steps=STEPS, max_rows=MAX_TOKENS, max_reqs=MAX_REQS,
                                   group=group, timeout_ns=int(args.timeout_s * 1e9), ranks_per_device=sharing,
                                   **placement)
    return {"ar": ar, "sampler": sampler}


def step_inputs(args: argparse.Namespace, device, rank: int, world: int) -> dict:
    """The step's tensors, allocated once (a graph replays on fixed pointers): this rank's all-reduce partial,
    the replicated mHC state and the sampler's request state."""
    m, vocab = args.rows, VOCAB_PER_RANK * world

    def tensor(shape, salt, dtype=torch.bfloat16, scale=1.0):
        """A seeded normal tensor (the same on every rank unless ``salt`` holds the rank)."""
        return (torch.randn(shape, generator=generator(args.seed, *salt)) * scale).to(dtype).to(device)

    uniform = torch.rand(m * STEPS, vocab, generator=generator(args.seed, 23)).clamp_(1e-6, 1 - 1e-6)
    return {
        "x": tensor((m, HIDDEN), (1, rank)), "residual": tensor((m, HC, HIDDEN), (2,)),
        "post": tensor((m, HC), (3,), torch.float32, 0.5), "comb": tensor((m, HC, HC), (4,), torch.float32, 0.5),
        "pre": tensor((m, HC), (5,), torch.float32, 0.5), "norm_weight": tensor((HIDDEN,), (6,)),
        "input_ids": torch.randint(0, vocab, (m,), generator=generator(args.seed, 22), dtype=torch.int32).to(device),
        "idx_mapping": torch.arange(m, dtype=torch.int64).repeat_interleave(STEPS).to(device),
        "temperature": torch.tensor([0.0, 1.0, 0.5, 2.0] * 2, dtype=torch.float32).to(device),
        "noise": (-torch.log(-torch.log(uniform))).to(device),
        "base_logits": torch.randn(m, STEPS, vocab, generator=generator(args.seed, 24)).bfloat16().to(device),
        "logits_cache": torch.zeros(MAX_REQS, STEPS, vocab, dtype=torch.bfloat16, device=device),
        "draft_tokens": torch.empty(m, STEPS, dtype=torch.int64, device=device),
    }


def decode_step(objects, t: dict) -> None:
    """One decode step: the all-reduce after attention, then the speculator's draft chain."""
    objects["ar"](t["x"], t["residual"], t["post"], t["comb"], t["pre"], t["norm_weight"], 1e-6, protocol="ll")
    objects["sampler"](t["base_logits"], t["input_ids"], 1, t["idx_mapping"], t["temperature"], t["noise"],
                       t["logits_cache"], t["draft_tokens"])


def run_loop(objects, t: dict, args: argparse.Namespace, rank: int) -> int:
    """Step 0 eagerly (the warm-up), then steps 1..K replayed from one graph (or called, ``--eager``); the planted
    rank skips step K. The steps this rank made."""
    import torch.distributed as dist

    on_gpu = args.impl == "kernel"
    decode_step(objects, t)
    if on_gpu:
        torch.cuda.synchronize()
    graph = None if args.eager else capture(lambda: decode_step(objects, t))[0]
    dist.barrier()  # no rank replays (and waits on peers) before every rank captured
    made = 1
    for step in range(1, args.replays + 1):
        if rank == args.desync_rank and step == args.replays:
            continue  # the planted bug: this rank's scheduler skips the step
        if graph is not None:
            graph.replay()
        else:
            decode_step(objects, t)
        made += 1
    if on_gpu:
        torch.cuda.synchronize()  # a trapped kernel (a peer never came) raises here
    return made


def refuse_old_rings(directory: str | None) -> str | None:
    """Why ``directory`` cannot take this job's rings (it holds rings of another job), or None."""
    if directory and Path(directory).is_dir() and any(Path(directory).rglob("*.ring")):
        return f"--flight-dir {directory} already holds rings (of an earlier job): give an empty directory"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the loop on this rank; exit 0 completed / 1 failed here / 2 bad arguments or no GPU."""
    args = parse_args(argv)
    if args.impl == "kernel" and not torch.cuda.is_available():
        print("examples/graph_desync.py --impl kernel needs a CUDA GPU (torch finds none); --eager --impl golden "
              "runs on the CPU", file=sys.stderr)
        return BAD_ARGS_EXIT
    import torch.distributed as dist

    import rankcheck

    problem = refuse_old_rings(args.flight_dir)
    if problem:
        print(problem, file=sys.stderr)
        return BAD_ARGS_EXIT
    device, rank, world = join_world(args.impl == "kernel", args.pg_timeout_s, solo_port=29535)
    if args.desync_rank is not None and not 0 <= args.desync_rank < world:
        print(f"--desync-rank: expected a rank in 0..{world - 1}, got {args.desync_rank}", file=sys.stderr)
        return BAD_ARGS_EXIT
    dist.barrier()  # every rank checked the flight directory before any ring is made in it
    try:
        group = world_group(args.impl, device)
        objects = build_objects(args.impl, group, device, args, world)
        inputs = step_inputs(args, device, rank, world)
        recording = rankcheck.recording(objects, args.record) if args.record else nullcontext(objects)
        with recording as wrapped:
            made = run_loop(wrapped, inputs, args, rank)
        dist.barrier()
    except Exception as exc:  # noqa: BLE001 - this rank's verdict: the rings and the recording are on disk
        print(f"rank {rank}: decode loop failed: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
        return 1
    print(f"rank {rank}: {made} of {args.replays + 1} steps ({'eager' if args.eager else 'graph replays'}), "
          f"impl {args.impl}, world {world}", file=sys.stderr)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
