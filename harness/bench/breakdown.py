"""``python -m harness.bench.breakdown``: where a kernel's time goes, from its ``%globaltimer`` phase stamps.

``--family {markov_sharded,markov_fused} [--world 1] [--rows 8] [--steps 8]
[--vocab 129280] [--warmup 3] [--reps 10] [--eager] [--json PATH]
[--detail]`` builds the family's bench-only stamped variant with the bench
case's weights and inputs, runs it ``warmup`` times, then ``reps`` times,
reading the stamps after each call:

- ``markov_sharded``: ``ShardedMarkovSampler(..., stamps=True)`` on
  ``world`` virtual ranks of this GPU (``harness/families/markov_sharded/bench.py``); thread
  0 of every CTA stamps the end of each phase of the one cooperative kernel
  (``kernels/markov_sharded/kernel.py``). Eager launches.
- ``markov_fused`` (tp 1): ``FusedMarkovLoop(..., stamps=True)`` with the
  bench's GEMV (``HeadGemv``) and PDL (``harness/families/markov_fused/bench.py``): thread 0
  of every step CTA stamps its phases (``StepKernel``), a CTA slot ``(row, block)`` is followed through the
  steps, and ``between`` is the time from the slot's previous step to this
  one (the bias GEMV and the launches). The call is captured in a CUDA
  graph and replayed, as the bench times it (``--eager``: launched eagerly,
  host validation and launch latency included).

- ``allreduce_mhc`` (``--world``, ``--rows``, ``--hidden``, ``--protocol``):
  no stamped variant; the kernels' flight-recorder records carry a begin
  and an end stamp each, so ``harness.bench.flight_timeline`` times every
  kernel of the chain and the gaps between them, and the rank skew, from
  16 calls captured in one CUDA graph, replayed ``reps`` times.

For the Markov families it prints one table: per phase kind (a step's phases summed over the
steps), the median over CTAs of its duration, the least and the most of any
CTA, and its share of the median CTA's span (first stamp to last); below it,
the critical path (the latest CTA's last stamp minus the earliest CTA's
first, every rank's CTAs pooled: ``%globaltimer`` is one clock for the GPU),
the call time from CUDA events and what of it lies outside the stamps.
Every figure is the median over the timed calls. ``--detail`` prints each
step's phases too; ``--json PATH`` writes both tables.

The table arithmetic (``phase_table``, ``kind_table``, ``summarize_launches``)
is pure Python on a ``[ctas][stamps]`` list of nanosecond values, so the CPU
tests check it on a synthetic buffer. A stamp left 0 (a phase a CTA never
reached, e.g. no resident tile) takes the previous stamp's value: its
phase lasts 0.

Stamps cost a few stores and timer reads per CTA and step; ``%globaltimer``
ticks at a granularity of tens of nanoseconds to a microsecond, depending on
the GPU and driver, so the sub-microsecond phases are only read in
aggregate. Exit status: 0 printed; 2 bad arguments, a family without
stamps, or no GPU ("needs a GPU").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Sequence

import torch

from harness.families.markov_fused import bench as fused_case
from harness.families.markov_sharded import bench as sharded_case
from harness.bench.cases.virtual import build_ranks, launch_ranks
from harness.bench.flight_timeline import format_timeline, measure_allreduce, timeline
from golden.families import FAMILIES
from harness.wire.command_line import command_parser


def filled(row: Sequence[int]) -> list[int]:
    """One CTA's stamps with every 0 after the first replaced by the stamp before it."""
    out: list[int] = []
    for value in row:
        out.append(value if value or not out else out[-1])
    return out


def phase_table(names: Sequence[str], stamps: Sequence[Sequence[int]]) -> dict:
    """Per phase (each stamp after the first ends one): median, min and max over CTAs of its duration (ns),
    its share of the median CTA span, and the critical path; ``stamps`` is ``[ctas][len(names)]``."""
    rows = [filled(row) for row in stamps]
    if not rows or any(len(row) != len(names) for row in rows):
        raise ValueError(f"stamps: expected [ctas][{len(names)}] values, got {len(rows)} rows")
    spans = [row[-1] - row[0] for row in rows]
    span = statistics.median(spans)
    phases = []
    for k in range(1, len(names)):
        durations = [row[k] - row[k - 1] for row in rows]
        median = statistics.median(durations)
        phases.append({"phase": names[k], "median_ns": median, "min_ns": min(durations), "max_ns": max(durations),
                       "share": median / span if span else 0.0})
    return {"phases": phases, "cta_span_ns": span, "ctas": len(rows),
            "critical_path_ns": max(row[-1] for row in rows) - min(row[0] for row in rows)}


def phase_kind(name: str) -> str:
    """A phase's kind: its name without the step prefix (``s3.wait`` -> ``wait``)."""
    head, _, tail = name.partition(".")
    return tail if tail and head[:1] == "s" and head[1:].isdigit() else name


def kind_table(names: Sequence[str], stamps: Sequence[Sequence[int]]) -> dict:
    """``phase_table`` with each CTA's phases of one kind summed over the steps first (kinds in first-seen order)."""
    rows = [filled(row) for row in stamps]
    kinds: list[str] = []
    for name in names[1:]:
        if phase_kind(name) not in kinds:
            kinds.append(phase_kind(name))
    summed = []
    for row in rows:
        per_kind = dict.fromkeys(kinds, 0)
        for k in range(1, len(names)):
            per_kind[phase_kind(names[k])] += row[k] - row[k - 1]
        # Cumulative stamps again, so phase_table's arithmetic applies.
        cumulative = [row[0]]
        for kind in kinds:
            cumulative.append(cumulative[-1] + per_kind[kind])
        summed.append(cumulative)
    table = phase_table(["start", *kinds], summed)
    table["critical_path_ns"] = max(row[-1] for row in rows) - min(row[0] for row in rows)
    return table


def _median_tables(tables: Sequence[dict]) -> dict:
    """The field-by-field median of tables of the same phases (one per launch)."""
    phases = []
    for i, first in enumerate(tables[0]["phases"]):
        entries = [t["phases"][i] for t in tables]
        phases.append({"phase": first["phase"],
                       **{f: statistics.median(e[f] for e in entries) for f in ("median_ns", "min_ns", "max_ns",
                                                                               "share")}})
    return {"phases": phases, "ctas": tables[0]["ctas"],
            **{f: statistics.median(t[f] for t in tables) for f in ("cta_span_ns", "critical_path_ns")}}


def summarize_launches(names: Sequence[str], launches: Sequence[Sequence[Sequence[int]]],
                       call_us: Sequence[float] = ()) -> dict:
    """The breakdown of several launches' stamp buffers: per-kind and per-phase tables, medians over launches."""
    if not launches:
        raise ValueError("launches: expected at least one stamp buffer")
    result = {"launches": len(launches), "by_kind": _median_tables([kind_table(names, s) for s in launches]),
              "by_phase": _median_tables([phase_table(names, s) for s in launches])}
    if call_us:
        result["call_us_median"] = statistics.median(call_us)
        result["outside_stamps_us"] = result["call_us_median"] - result["by_kind"]["critical_path_ns"] / 1e3
    return result


def format_table(table: dict, title: str) -> str:
    """A small fixed-width table of one ``phase_table``/``kind_table`` result (microseconds)."""
    lines = [title, f"{'phase':<14}{'median us':>11}{'min us':>10}{'max us':>10}{'share':>8}"]
    for p in table["phases"]:
        lines.append(f"{p['phase']:<14}{p['median_ns'] / 1e3:>11.2f}{p['min_ns'] / 1e3:>10.2f}"
                     f"{p['max_ns'] / 1e3:>10.2f}{p['share'] * 100:>7.1f}%")
    lines.append(f"median CTA span {table['cta_span_ns'] / 1e3:.2f} us over {table['ctas']} CTAs; "
                 f"critical path {table['critical_path_ns'] / 1e3:.2f} us")
    return "\n".join(lines)


def measure_markov_sharded(*, world: int, rows: int, steps: int, vocab: int, warmup: int, reps: int):
    """``(stamp names, [launch][ctas][stamps], call times in us)`` of the stamped sampler on this GPU."""
    from kernels.markov_sharded.host import ShardedMarkovSampler  # noqa: PLC0415 - CuTe DSL: loaded when this breakdown runs, not at --help

    device = torch.device("cuda", torch.cuda.current_device())
    static = sharded_case.make_static(device, vocab=vocab)
    ranks = build_ranks(world, device, lambda fabric: ShardedMarkovSampler(
        static["embed_table"], static["head"], steps=steps, base_dtype="bfloat16", cache_dtype="bfloat16",
        max_rows=rows, max_reqs=rows, group=fabric, timeout_ns=sharded_case.TIMEOUT_NS, stamps=True))
    gen = torch.Generator(device=device).manual_seed(4)
    inputs = sharded_case.make_inputs(device, gen, world, rows=rows, steps=steps, vocab=vocab)
    tokens = [torch.empty(rows, steps, dtype=torch.int64, device=device) for _ in range(world)]

    def launch(rank: int, sampler) -> None:
        """Rank ``rank``'s launch on the case inputs."""
        sampler(inputs["base_logits"], inputs["input_ids"], sharded_case.PARAMS["query_per_row"], inputs["idx_mapping"],
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


def measure_markov_fused(*, rows: int, steps: int, vocab: int, warmup: int, reps: int, graph: bool):
    """``(stamp names, [call][rows * blocks][stamps], call times in us)`` of the stamped fused loop on this GPU."""
    from harness.families.markov_fused.kernel import FusedMarkovLoop  # noqa: PLC0415 - CuTe DSL: loaded when this breakdown runs, not at --help
    from kernels.markov_fused.head_gemv import HeadGemv  # noqa: PLC0415 - CuTe DSL: loaded when this breakdown runs, not at --help

    device = torch.device("cuda", torch.cuda.current_device())
    static = fused_case.make_static(device, vocab=vocab, dim=fused_case.DIM)
    loop = FusedMarkovLoop(None, static, fused_case.make_config(vocab=vocab, dim=fused_case.DIM, max_reqs=rows), stamps=True,
                           bias_fn=HeadGemv(fused_case.DIM, device))
    inputs = fused_case.make_inputs(device, torch.Generator(device=device).manual_seed(2), rows=rows, steps=steps,
                              vocab=vocab)
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


def _sharded_run(args: argparse.Namespace, sizes: dict) -> tuple[list[str], list, list[float], str]:
    """The stamped sampler on ``args.world`` virtual ranks: stamp names, launches, call times and how it ran."""
    return (*measure_markov_sharded(world=args.world, **sizes), "eager launches")


def _fused_run(args: argparse.Namespace, sizes: dict) -> tuple[list[str], list, list[float], str]:
    """The stamped fused loop at tp 1: stamp names, launches, call times and how it ran."""
    return (*measure_markov_fused(graph=not args.eager, **sizes), "eager calls" if args.eager else "CUDA graph replays")


# The registered families that have a bench-only stamped variant, and how each is measured.
STAMPED_RUNS = {"markov_sharded": _sharded_run, "markov_fused": _fused_run}


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck bench breakdown`` command line (also ``python -m harness.bench.breakdown``)."""
    parser = command_parser("bench breakdown", description="Per-phase time of a kernel from its %globaltimer stamps.")
    parser.add_argument("--family", required=True, choices=FAMILIES,
                        help=f"stamped: {', '.join(STAMPED_RUNS)}; allreduce_mhc: from its flight-recorder stamps")
    parser.add_argument("--world", type=int, default=1, help="virtual ranks on this GPU")
    parser.add_argument("--rows", type=int, default=8, help="rows (sequences) per call")
    parser.add_argument("--steps", type=int, default=8, help="decode steps per call")
    parser.add_argument("--vocab", type=int, default=129280, help="vocabulary size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    parser.add_argument("--reps", type=int, default=10, help="timed calls whose medians are printed")
    parser.add_argument("--eager", action="store_true", help="markov_fused: launch eagerly, not a CUDA graph replay")
    parser.add_argument("--hidden", type=int, default=5120, help="allreduce_mhc: the hidden size H")
    parser.add_argument("--protocol", choices=("ll", "bt"), default="ll", help="allreduce_mhc: the protocol forced")
    parser.add_argument("--detail", action="store_true", help="also print every step's phases")
    parser.add_argument("--json", help="write the tables as JSON to this path (default: none)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, measure on this GPU and print the breakdown (module docstring)."""
    args = build_parser().parse_args(argv)
    if args.family == "allreduce_mhc":
        return _flight_breakdown(args)
    if args.family not in STAMPED_RUNS:
        print(f"breakdown: no stamped variant for family {args.family!r} (stamped: {', '.join(STAMPED_RUNS)})",
              file=sys.stderr)
        return 2
    if args.reps < 1 or args.warmup < 0 or args.world < 1 or (args.family == "markov_fused" and args.world != 1):
        print("breakdown: --reps must be >= 1, --warmup >= 0, --world >= 1 (markov_fused: 1)", file=sys.stderr)
        return 2

    if not torch.cuda.is_available():
        print("breakdown: needs a GPU (torch.cuda.is_available() is False); nothing was run", file=sys.stderr)
        return 2
    sizes = dict(rows=args.rows, steps=args.steps, vocab=args.vocab, warmup=args.warmup, reps=args.reps)
    names, launches, call_us, how = STAMPED_RUNS[args.family](args, sizes)
    result = summarize_launches(names, launches, call_us)
    result["config"] = {"family": args.family, "world": args.world, **sizes, "graph": how,
                        "device": torch.cuda.get_device_name()}
    title = (f"{args.family} world {args.world}, rows {args.rows}, steps {args.steps}, vocab {args.vocab}: "
             f"medians of {args.reps} {how}")
    print(format_table(result["by_kind"], title))
    print(f"stamped call {result['call_us_median']:.1f} us (CUDA events); outside the stamps "
          f"{result['outside_stamps_us']:.1f} us")
    if args.detail:
        print()
        print(format_table(result["by_phase"], "every phase"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


def _flight_breakdown(args: argparse.Namespace) -> int:
    """The all-reduce's kernels and gaps from its flight-recorder stamps (``harness.bench.flight_timeline``)."""
    if args.reps < 1 or args.warmup < 0 or args.world < 1 or args.rows < 1 or args.hidden < 1:
        print("breakdown: --reps, --world, --rows and --hidden must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("breakdown: needs a GPU (torch.cuda.is_available() is False); nothing was run", file=sys.stderr)
        return 2
    records, per_call_us, chain = measure_allreduce(world=args.world, rows=args.rows, hidden=args.hidden,
                                                    protocol=args.protocol, warmup=args.warmup, reps=args.reps)
    table = timeline(records, calls=16, kernels_per_call=chain)
    table["call_us_median"] = statistics.median(per_call_us)
    table["config"] = {"family": args.family, "world": args.world, "rows": args.rows, "hidden": args.hidden,
                       "protocol": args.protocol, "graph": "16 calls per CUDA graph replay",
                       "device": torch.cuda.get_device_name()}
    print(format_timeline(table, f"allreduce_mhc {args.protocol.upper()} world {args.world}, M {args.rows}, "
                                 f"H {args.hidden}: flight-recorder stamps of the last replay"))
    print(f"graph replay {table['call_us_median']:.2f} us per call (CUDA events, median of {args.reps})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(table, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
