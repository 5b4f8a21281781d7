"""The fused loop's stall stress: every configuration that stalled, many runs, in one process (GPU).

``python tests/kernels/fused_stall_stress.py [--runs 50] [--keep]`` runs the
loop on in-process virtual ranks (``kernels.fabric.VirtualFabric``) at tp 2,
4 and 8, R 64 and 256, plain and with padding rows, corrupt anchors and
wrapped positions (12 configurations), ``--runs`` calls each, and compares
every rank's outputs of every call with the golden loop bit for bit. By
default each call is made as ``test_markov_fused_gpu.run_kernels`` makes it:
every rank builds its loop, calls once and drops the loop right away, while a
slower peer may still be launching (the idiom that stalled, module docstring
of ``kernels.flight``); ``--keep`` builds the loops once and calls them
``--runs`` times. ``--release-on-drop`` puts back the old teardown (a dropped
flight recorder unregisters its ring at once, in whichever thread drops it)
to show the stall the fix removed. The exchange deadline is the harness's 10 s: a stall traps
the context, which ends the process with the configuration and run named on
stderr. Prints one line per configuration and exits 0 only when every run of
every configuration was golden.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import test_markov_fused_gpu as fused_test  # noqa: E402

CONFIGS = [(tp, dim, injected) for tp in (2, 4, 8) for dim in (64, 256) for injected in (False, True)]


def stress(tp: int, dim: int, injected: bool, runs: int, keep: bool) -> int:
    """Golden calls of one configuration out of ``runs`` (a stall ends the process instead)."""
    from harness.families.markov_fused.kernel import FusedMarkovLoop
    from kernels import hostcopy
    from kernels.fabric import VirtualFabric

    static, inputs = fused_test.build_case(vocab=4096, dim=dim, seed=tp * 31 + dim, padding=injected,
                                           corrupt=injected, wrap=injected)
    config = fused_test.config_of(4096, dim=dim, block=256)
    want = fused_test.golden(static, config, inputs)
    if not keep:
        return sum(_golden(fused_test.run_kernels(static, config, inputs, tp=tp, pdl=True), want) for _ in range(runs))
    static_gpu = {k: v.cuda() for k, v in static.items()}
    fabrics = VirtualFabric.create(tp, "cuda", timeout_s=120)
    cfg = {**config, "tp": tp, "pdl": True}
    loops = VirtualFabric.run(fabrics, lambda f: FusedMarkovLoop(f, static_gpu, cfg, bias_fn=fused_test.grid_bias))
    golden_runs = 0
    for _ in range(runs):
        rank_inputs = [fused_test.to_gpu(inputs) for _ in range(tp)]
        torch.cuda.synchronize()

        def body(fabric):
            """One rank's call, its outputs on the host."""
            out = loops[fabric.rank].launch(rank_inputs[fabric.rank], {})
            torch.cuda.current_stream().synchronize()
            return {k: hostcopy.to_host(v).clone() for k, v in out.items()}

        golden_runs += _golden(VirtualFabric.run(fabrics, body), want)
    return golden_runs


def _golden(per_rank: list, want: dict) -> int:
    """1 when every rank's outputs equal ``want`` bit for bit, else 0 (the first mismatch printed)."""
    try:
        for rank, got in enumerate(per_rank):
            fused_test.assert_same(got, want, f"rank {rank}")
    except AssertionError as exc:
        print(f"  mismatch: {exc}", flush=True)
        return 0
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run every configuration; one line each, and a total."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="calls per configuration (default 50)")
    parser.add_argument("--keep", action="store_true", help="build the loops once per configuration")
    parser.add_argument("--release-on-drop", action="store_true",
                        help="the old teardown, for comparison: a dropped recorder unregisters its ring at once")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs: expected >= 1")
    if args.release_on_drop:
        from kernels import flight

        flight._retire = flight._release  # the finalizer binds _retire when a recorder is built
    print(f"fused loop stall stress: {args.runs} runs per configuration, "
          f"{'loops kept' if args.keep else 'a loop built and dropped per call'}"
          f"{', old release on drop' if args.release_on_drop else ''}; {torch.cuda.get_device_name()}")
    total = failed = 0
    for tp, dim, injected in CONFIGS:
        label = f"tp {tp} R {dim} {'padding+corrupt+wrap' if injected else 'plain'}"
        print(f"  {label}: running", file=sys.stderr, flush=True)  # a trap ends the process after this line
        started = time.monotonic()
        golden = stress(tp, dim, injected, args.runs, args.keep)
        total, failed = total + args.runs, failed + args.runs - golden
        print(f"{label:34s} runs {args.runs:3d} golden {golden:3d} {time.monotonic() - started:6.1f} s", flush=True)
    # Reaching this line is the no-stall evidence: a stalled exchange traps, and the process ends above.
    print(f"total: {total} runs, {total - failed} golden, {failed} not golden; every run finished (no stall)")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
