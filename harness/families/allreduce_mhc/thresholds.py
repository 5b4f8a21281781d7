"""The LL/BT row thresholds of ``kernels.allreduce_mhc``, derived from a bench results document.

The all-reduce picks its protocol per call from the row count: LL (one
Lamport round, every rank reads every peer's whole contribution) below a
threshold, BT (owner-reduced fragments, three kernels) from it on. The
crossover depends on the machine, the fabric, the TP size and H, so it is
measured, never guessed: ``harness bench --family allreduce_mhc`` times both
protocols at several M for each (tp, H) and source (plain, finalize) on the
same inputs, and this module turns those medians into entries of a
thresholds table::

    "sm_90a/virtual/tp2/h5120": {
        "bt_min_rows": 64,            # null: BT was never faster (LL only)
        "bt_min_finalize_rows": 32,   # absent when finalize was not measured
        "source": "runs/bench/bench-....json", "device": "...", "date": "...",
        "measured": {"plain": {"rows": [...], "ll_us": [...], "bt_us": [...]}, ...},
        "rule": "..."}

Rule (``harness.bench.tables.crossover``, which the summary's table uses
too): the smallest measured M from which BT's CUDA-graph
median is below LL's at that M and at every larger measured M; rows between
two measured M take the larger one (LL in the gap, which was measured no
worse there). The provider is part of the key: virtual ranks share one GPU's
SMs and memory, so their crossover is recorded as theirs and never applied to
ranks on NVLink.

Where they go: by default this machine's own table in the user cache,
``allreduce_thresholds.json`` under ``$RANKCHECK_CACHE_DIR`` (else
``$XDG_CACHE_HOME/rankcheck`` or ``~/.cache/rankcheck``;
``kernels.allreduce_mhc.protocol_rows.user_thresholds_file``), which
``AllReduceMHC`` reads over the shipped ``kernels/allreduce_mhc/thresholds.json``.
A bench run therefore leaves the source tree clean and never writes into an
installed, possibly read-only or shared package; the shipped defaults change
only when asked by name (``--thresholds-into kernels/allreduce_mhc/thresholds.json``
and a commit).

``harness bench`` does this itself at the end of a run that measured both
protocols at some shape (``record``, the family's ``RECORD_THRESHOLDS`` bench
hook: into the user cache unless
``--thresholds-into`` names another file), so a run on a node refreshes that
node's platform keys. ``python -m harness.families.allreduce_mhc.thresholds RESULT.json
[--into PATH]`` does it for a results file kept from an earlier run: it
prints the derived entries and merges them into PATH (default the user
cache).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Mapping, Sequence

from harness.bench.tables import crossover, measurements
from harness.wire.case_files import REPO_ROOT
from kernels.allreduce_mhc.config import arch_of_capability, threshold_key
from kernels.allreduce_mhc.protocol_rows import read_table, user_thresholds_file

FAMILY = "allreduce_mhc"
RULE = ("smallest measured M from which the BT graph median is below LL's at it and at every larger "
        "measured M; null when there is none (LL only)")


def arch_of(capability: str) -> str:
    """The CuTe DSL target of a ``major.minor`` capability string (``kernels.allreduce_mhc.config``'s mapping)."""
    major, _, minor = str(capability).partition(".")
    return arch_of_capability(int(major), int(minor or 0))


def derive(document: Mapping, source: str) -> dict[str, dict]:
    """The thresholds entries of one results document (only shapes where both protocols were timed)."""
    arch = arch_of(document["device"]["capability"])
    entries: dict[str, dict] = {}
    for (provider, tp, hidden, kind), by_rows in sorted(measurements(document, FAMILY).items()):
        rows = sorted(m for m, medians in by_rows.items() if {"ll", "bt"} <= set(medians))
        if not rows:
            continue
        ll = [by_rows[m]["ll"] for m in rows]
        bt = [by_rows[m]["bt"] for m in rows]
        key = threshold_key(arch, provider, tp, hidden)
        entry = entries.setdefault(key, {"source": source, "device": document["device"]["name"],
                                         "date": document["date"], "rule": RULE, "measured": {}})
        entry["measured"][kind] = {"rows": rows, "ll_us": ll, "bt_us": bt}
        entry["bt_min_finalize_rows" if kind == "finalize" else "bt_min_rows"] = crossover(rows, ll, bt)
    for entry in entries.values():
        entry.setdefault("bt_min_rows", None)  # finalize measured alone: the plain source stays LL only
    return entries


def merge_into(path: str, entries: Mapping[str, dict]) -> dict:
    """Merge ``entries`` into the table at ``path`` (created, with its directory, if absent), atomically; return
    the table (ValueError naming the file when what is there is not a table)."""
    table = read_table(path)
    table.update(entries)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(dict(sorted(table.items())), fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)
    return table


def record(document: Mapping, result_path: str, into: str | None = None) -> list[str]:
    """Merge the crossovers measured in ``document`` (written at ``result_path``) into ``into`` (default: the user
    cache); the lines to print, none when the document timed no shape with both LL and BT."""
    entries = derive(document, os.path.relpath(os.path.abspath(result_path), REPO_ROOT))
    if not entries:
        return []
    into = into or user_thresholds_file()
    merge_into(into, entries)
    return [f"thresholds: {format_entry(key, entry)}" for key, entry in entries.items()] + [
        f"thresholds: merged {len(entries)} measured LL/BT crossovers into {into}"]


def format_entry(key: str, entry: Mapping) -> str:
    """One line per entry: the key, both thresholds and the medians they came from."""
    parts = [f"{key}: bt_min_rows={entry.get('bt_min_rows')}"]
    if "bt_min_finalize_rows" in entry:
        parts.append(f"bt_min_finalize_rows={entry['bt_min_finalize_rows']}")
    for kind, m in entry["measured"].items():
        pairs = ", ".join(f"M{r} {a:.1f}/{b:.1f}" for r, a, b in zip(m["rows"], m["ll_us"], m["bt_us"]))
        parts.append(f"[{kind} LL/BT us: {pairs}]")
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Derive, print and merge the thresholds of one results file; 2 when it holds no LL/BT pair."""
    parser = argparse.ArgumentParser(prog="python -m harness.families.allreduce_mhc.thresholds", description=__doc__.split("\n")[0])
    parser.add_argument("result", help="a bench results JSON (rankcheck-bench/1)")
    parser.add_argument("--into", metavar="PATH",
                        help="thresholds table to merge into (default: allreduce_thresholds.json in the user cache, "
                             "$RANKCHECK_CACHE_DIR, else $XDG_CACHE_HOME/rankcheck or ~/.cache/rankcheck)")
    parser.add_argument("--dry-run", action="store_true", help="print only")
    args = parser.parse_args(argv)
    with open(args.result) as fh:
        document = json.load(fh)
    entries = derive(document, os.path.relpath(os.path.abspath(args.result), REPO_ROOT))
    if not entries:
        print(f"thresholds: {args.result} has no {FAMILY} case timed with both LL and BT", file=sys.stderr)
        return 2
    lines = ([format_entry(key, entry) for key, entry in entries.items()] if args.dry_run
             else record(document, args.result, args.into))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
