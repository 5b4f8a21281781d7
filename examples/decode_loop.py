"""A decode loop under torchrun, every family called each step, with ``rankcheck.recording`` on every rank.

Run it under torchrun, one process per rank (ranks may share a GPU):

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/decode_loop.py --record /tmp/rec

Each decode step calls the families in the order a serving engine does:
the all-reduce after attention (``allreduce_mhc``), then the speculator's
samplers (``markov_sharded``, ``markov_fused``). Each family is its per-rank
system (docs/interfaces.md: ``launch(call_inputs, call_params)``), built by
the harness's adapter over the process group for ``--impl kernel`` (the
CuTe DSL kernels through their public API, peer buffers from torch symmetric
memory) or ``--impl golden`` (the eager golden loops over gloo: runs on a
CPU). A step's batch is one of the family's ``basic`` scenario's calls (the
scenario builds valid inputs; the row counts change from step to step as
requests come and go).

With ``--record DIR`` every family's system is wrapped in
``rankcheck.recording`` and each rank writes ``DIR/<family>/`` (one bundle
per rank plus the world manifest) however the loop ends: normally, on an
exception, or on SIGTERM/SIGINT (a job that hung and was killed).
``python -m harness replay --bundle DIR`` then replays it offline.

``--desync-rank R`` plants a production-like bug on rank R at step
``--desync-step`` (default 2): ``stale`` (default), its scheduler hands it the
previous step's batch (other rows than its peers'); ``skip``, it skips the
step (an early ``continue`` on one rank). The golden ranks then meet in a
mismatched exchange and fail; kernels may hang or produce other bits.

Exit 0 when the loop completed, 1 when it failed on this rank (an exception
ends the loop: the recording is written and the error printed), 2 on bad
arguments or ``--impl kernel`` without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Importing decode_step (this directory) sets NVLink multicast off and lets ranks of one GPU map each
# other's buffers, before torch.distributed or symmetric memory are touched.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_step  # noqa: E402, F401
import torch  # noqa: E402

FAMILIES = ("allreduce_mhc", "markov_sharded", "markov_fused")
SCENARIOS = {"allreduce_mhc": "basic_ll", "markov_sharded": "basic", "markov_fused": "basic"}
BAD_ARGS_EXIT = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=("kernel", "golden"), default="kernel",
                        help="kernel: the CuTe DSL kernels (a GPU); golden: the eager loops (CPU, gloo)")
    parser.add_argument("--family", choices=FAMILIES + ("all",), default="all")
    parser.add_argument("--steps", type=int, default=6, help="decode steps")
    parser.add_argument("--record", metavar="DIR", help="record every rank into DIR/<family>/")
    parser.add_argument("--max-calls", type=int, default=64, help="calls kept per rank and family (the newest)")
    parser.add_argument("--desync-rank", type=int, help="plant a desynchronisation on this rank")
    parser.add_argument("--desync-step", type=int, default=2, help="the step at which it happens")
    parser.add_argument("--desync-kind", choices=("stale", "skip"), default="stale",
                        help="stale: the rank gets the previous step's batch; skip: it skips the step")
    parser.add_argument("--timeout", type=float, default=60.0, help="collective timeout of the process group (s)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.max_calls < 1 or args.timeout <= 0:
        parser.error("--steps and --max-calls must be >= 1 and --timeout > 0")
    if args.desync_step < 1 or args.desync_step >= args.steps:
        parser.error(f"--desync-step must lie in 1..{args.steps - 1} (a stale batch needs a previous step)")
    return args


def build_family(family: str, impl: str, handle_of, world: int) -> tuple:
    """(system, static, config, batches) of ``family``: its adapter's system and the scenario's calls as batches."""
    from harness.families import adapter, catalog, placed
    from scenarios import builders

    fam = adapter(family)
    [case] = catalog.select(catalog.discover(), family=family, names=[SCENARIOS[family]])
    scenario = catalog.load(case.path)
    static = builders.build_static(scenario)
    config = builders.family_config(scenario, world)
    config.update(fam.start_config(scenario.initial_state()))
    batches = [builders.build_call(scenario, ci, world) for ci in range(len(scenario.calls))]
    system = fam.make_system(impl, handle_of(fam), placed(static, "cpu"), config)
    return system, static, config, batches


def batch_for(batches: list, step: int, rank: int, args: argparse.Namespace) -> tuple | None:
    """The (inputs, params) this rank passes at ``step`` (None: it skips the step); the planted bug lives here."""
    from harness.families import placed

    index = step % len(batches)
    if rank == args.desync_rank and step == args.desync_step:
        if args.desync_kind == "skip":
            return None
        index = (step - 1) % len(batches)  # the stale batch: what the scheduler handed out last step
    inputs, params = batches[index]
    return placed(inputs, "cpu"), dict(params)  # fresh copies: a system may write into its inputs


def run_loop(systems: dict, batches: dict, rank: int, args: argparse.Namespace) -> None:
    """The decode loop: every step, each family once, in the order of a decode step."""
    for step in range(args.steps):
        for family, system in systems.items():
            call = batch_for(batches[family], step, rank, args)
            if call is not None:
                system.launch(*call)


def main(argv: list[str] | None = None) -> int:
    """Run the loop on this rank (recording when asked); exit 0 completed / 1 failed here / 2 bad arguments."""
    args = parse_args(argv)
    if args.impl == "kernel" and not torch.cuda.is_available():
        print("examples/decode_loop.py --impl kernel needs a CUDA GPU (torch finds none); --impl golden runs on "
              "the CPU", file=sys.stderr)
        return BAD_ARGS_EXIT
    import torch.distributed as dist

    import rankcheck
    from harness.rank.dist_comm import DistComm
    from harness.rank.worker import _distributed_handle

    device = "cpu"
    if args.impl == "kernel":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        device = f"cuda:{torch.cuda.current_device()}"
    if "RANK" not in os.environ:  # a plain `python examples/decode_loop.py`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.desync_rank is not None and not 0 <= args.desync_rank < world:
        print(f"--desync-rank: expected a rank in 0..{world - 1}, got {args.desync_rank}", file=sys.stderr)
        return BAD_ARGS_EXIT
    handle_of = _distributed_handle(args.impl, DistComm(None, device="cpu"), device)
    try:
        with ExitStack() as stack:
            systems, batches = {}, {}
            for family in FAMILIES if args.family == "all" else (args.family,):
                system, static, config, batches[family] = build_family(family, args.impl, handle_of, world)
                if args.record:
                    system = stack.enter_context(rankcheck.recording(
                        system, Path(args.record) / family, family=family, config=config, static=static,
                        max_calls=args.max_calls, rank=rank, world=world))
                systems[family] = system
            run_loop(systems, batches, rank, args)
    except Exception as exc:  # noqa: BLE001 - the recording is written; the error is this rank's verdict
        print(f"rank {rank}: decode loop failed: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
        return 1
    finally:
        if args.record:
            print(f"rank {rank}: recording in {args.record}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"decode loop: {args.steps} steps of {', '.join(systems)} on {world} rank(s), impl {args.impl}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
