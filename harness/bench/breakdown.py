"""``python -m harness.bench.breakdown``: where a kernel's time goes, from its ``%globaltimer`` phase stamps.

``--family F [--world 1] [--rows 8] [--steps 8] [--vocab 129280] [--warmup 3]
[--reps 10] [--eager] [--hidden 5120] [--protocol ll] [--json PATH]
[--detail]`` measures the family the way its bench module says
(``harness/families/<family>/bench*.py``, read with
``harness.bench.registry.family_hooks``), in one of two ways:

- stamped (``BREAKDOWN_STAMPED``, ``(args, sizes) -> (stamp names,
  [launch][ctas][stamps], call times in us, how it ran)``): the family's
  bench-only stamped variant, built with the bench case's weights and
  inputs, runs ``warmup`` times, then ``reps`` times, its stamps read after
  each call; ``BREAKDOWN_MAX_WORLD`` bounds ``--world`` where the variant
  has fewer ranks;
- from the flight recorder (``BREAKDOWN_FLIGHT``, ``(args) -> (records by
  rank, us per call of each replay, kernels per call, title)``): no stamped
  variant; the kernels' flight-recorder records carry a begin and an end
  stamp each, so ``harness.bench.flight_timeline`` times every kernel of
  the chain and the gaps between them, and the rank skew, from
  ``FLIGHT_CALLS`` calls captured in one CUDA graph, replayed ``reps``
  times.

For a stamped family it prints one table: per phase kind (a step's phases summed over the
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

from golden.families import FAMILIES
from harness.bench.flight_timeline import FLIGHT_CALLS, format_timeline, timeline
from harness.bench.registry import family_hooks
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


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck bench breakdown`` command line (also ``python -m harness.bench.breakdown``)."""
    parser = command_parser("bench breakdown", description="Per-phase time of a kernel from its %globaltimer stamps.")
    parser.add_argument("--family", required=True, choices=FAMILIES,
                        help=f"stamped: {', '.join(family_hooks('BREAKDOWN_STAMPED'))}; from the flight-recorder "
                             f"stamps: {', '.join(family_hooks('BREAKDOWN_FLIGHT'))}")
    parser.add_argument("--world", type=int, default=1, help="virtual ranks on this GPU")
    parser.add_argument("--rows", type=int, default=8, help="rows (sequences) per call")
    parser.add_argument("--steps", type=int, default=8, help="decode steps per call")
    parser.add_argument("--vocab", type=int, default=129280, help="vocabulary size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    parser.add_argument("--reps", type=int, default=10, help="timed calls whose medians are printed")
    parser.add_argument("--eager", action="store_true", help="a stamped family that replays a CUDA graph: launch eagerly")
    parser.add_argument("--hidden", type=int, default=5120, help="from the flight recorder: the hidden size H")
    parser.add_argument("--protocol", choices=("ll", "bt"), default="ll",
                        help="from the flight recorder: the protocol forced")
    parser.add_argument("--detail", action="store_true", help="also print every step's phases")
    parser.add_argument("--json", help="write the tables as JSON to this path (default: none)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, measure on this GPU and print the breakdown (module docstring)."""
    args = build_parser().parse_args(argv)
    flight, stamped = family_hooks("BREAKDOWN_FLIGHT"), family_hooks("BREAKDOWN_STAMPED")
    if args.family in flight:
        return _flight_breakdown(args, flight[args.family])
    if args.family not in stamped:
        print(f"breakdown: no stamped variant for family {args.family!r} (stamped: {', '.join(stamped)})",
              file=sys.stderr)
        return 2
    max_world = family_hooks("BREAKDOWN_MAX_WORLD").get(args.family, args.world)
    if args.reps < 1 or args.warmup < 0 or not 1 <= args.world <= max_world:
        print(f"breakdown: --reps must be >= 1, --warmup >= 0, --world >= 1 ({args.family}: at most {max_world})",
              file=sys.stderr)
        return 2

    if not torch.cuda.is_available():
        print("breakdown: needs a GPU (torch.cuda.is_available() is False); nothing was run", file=sys.stderr)
        return 2
    sizes = dict(rows=args.rows, steps=args.steps, vocab=args.vocab, warmup=args.warmup, reps=args.reps)
    names, launches, call_us, how = stamped[args.family](args, sizes)
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


def _flight_breakdown(args: argparse.Namespace, measure) -> int:
    """A family's kernels and gaps from its flight-recorder stamps (``harness.bench.flight_timeline``), measured by
    its ``BREAKDOWN_FLIGHT`` hook ``measure``."""
    if args.reps < 1 or args.warmup < 0 or args.world < 1 or args.rows < 1 or args.hidden < 1:
        print("breakdown: --reps, --world, --rows and --hidden must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("breakdown: needs a GPU (torch.cuda.is_available() is False); nothing was run", file=sys.stderr)
        return 2
    records, per_call_us, chain, title = measure(args)
    table = timeline(records, calls=FLIGHT_CALLS, kernels_per_call=chain)
    table["call_us_median"] = statistics.median(per_call_us)
    table["config"] = {"family": args.family, "world": args.world, "rows": args.rows, "hidden": args.hidden,
                       "protocol": args.protocol, "graph": f"{FLIGHT_CALLS} calls per CUDA graph replay",
                       "device": torch.cuda.get_device_name()}
    print(format_timeline(table, f"{title}: flight-recorder stamps of the last replay"))
    print(f"graph replay {table['call_us_median']:.2f} us per call (CUDA events, median of {args.reps})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(table, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
