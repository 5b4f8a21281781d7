"""Ratios between paired benchmark cases of one results document.

A kernel case names the case it is compared with in ``params["baseline"]``
(same family, same run: the eager torch loop, or the unfused path) and may
state goals in ``params["goal"]`` (``speedup_vs_eager``: at least this many
times faster than the baseline; ``floor_ratio``: at most this many times its
floor). For each such case, from the CUDA-graph medians:

- ``speedup`` = baseline median / kernel median,
- ``floor_ratio`` = kernel median / kernel floor (1.0 = at the floor),
- ``eager_speedup`` = the same ratio from the runner's eager launches,
- ``goal_met`` per stated goal (absent goals are not judged),
- ``floor_formula``, where the case gave its floor terms: what the floor counts;
- where peers were measured beside it (cases with ``params["peer"]`` and the
  kernel's ``params["peer_group"]``: the other implementations a user could
  pick at that shape), ``best_peer`` (its name), ``best_peer_graph_us`` and
  ``vs_best_peer`` = fastest peer median / kernel median.

``python -m harness.bench.cases.ratios RESULT.json...`` prints a table per
document (each floor's formula under its row) and writes
``<stem>.ratios.json`` beside it (as ``python -m harness bench`` does at the end of a run) (the pairs, then every
``references`` row the cases carry: published figures, not measured here).
A baseline missing from the document (failed, or not selected) gives a row
with ``error`` instead of numbers.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Mapping, Sequence


def pair_ratios(document: Mapping) -> list[dict]:
    """One row per case that names a baseline: medians, speedup, floor ratio and goals met."""
    by_key = {(c["family"], c["name"]): c for c in document["cases"]}
    rows = []
    for case in document["cases"]:
        baseline_name = case["params"].get("baseline")
        if baseline_name is None:
            continue
        row = {"family": case["family"], "case": case["name"], "baseline": baseline_name}
        baseline = by_key.get((case["family"], baseline_name))
        if baseline is None:
            row["error"] = f"baseline {case['family']}/{baseline_name} is not in this document"
            rows.append(row)
            continue
        kernel_us = case["graph"]["median_us"]
        row.update(
            kernel_graph_us=kernel_us,
            baseline_graph_us=baseline["graph"]["median_us"],
            floor_us=case["floor_us"]["graph"],
            speedup=baseline["graph"]["median_us"] / kernel_us,
            floor_ratio=kernel_us / case["floor_us"]["graph"],
            eager_speedup=baseline["eager"]["median_us"] / case["eager"]["median_us"],
            l2_cold=case["l2_cold"],
        )
        if case.get("floor_formula"):
            row["floor_formula"] = case["floor_formula"]
        row.update(_best_peer(document, case))
        goal = case["params"].get("goal") or {}
        met = {}
        if "speedup_vs_eager" in goal:
            met["speedup_vs_eager"] = row["speedup"] >= goal["speedup_vs_eager"]
        if "floor_ratio" in goal:
            met["floor_ratio"] = row["floor_ratio"] <= goal["floor_ratio"]
        if goal:
            row["goal"], row["goal_met"] = dict(goal), met
        rows.append(row)
    return rows


def _best_peer(document: Mapping, case: Mapping) -> dict:
    """The fastest peer measured in ``case``'s peer group and its ratio to ``case`` (empty when there is none)."""
    group = case["params"].get("peer_group")
    peers = [c for c in document["cases"] if group is not None and c["family"] == case["family"]
             and c["params"].get("peer") and c["params"].get("peer_group") == group]
    if not peers:
        return {}
    best = min(peers, key=lambda c: c["graph"]["median_us"])
    return {"best_peer": best["name"], "best_peer_graph_us": best["graph"]["median_us"],
            "vs_best_peer": best["graph"]["median_us"] / case["graph"]["median_us"]}


def reference_rows(document: Mapping) -> list[dict]:
    """Every distinct ``references`` row of the document's cases, with the cases that carry it."""
    rows: dict[str, dict] = {}
    for case in document["cases"]:
        for reference in case["references"]:
            key = json.dumps(reference, sort_keys=True)
            rows.setdefault(key, {**reference, "cases": []})["cases"].append(f"{case['family']}/{case['name']}")
    return list(rows.values())


def format_rows(rows: Sequence[Mapping]) -> list[str]:
    """Plain-text lines of a ratios table."""
    lines = [f"{'case':44s} {'kernel us':>10s} {'base us':>10s} {'speedup':>8s} {'x floor':>8s}  goals"]
    for row in rows:
        label = f"{row['family']}/{row['case']}"
        if "error" in row:
            lines.append(f"{label:44s} {row['error']}")
            continue
        goals = " ".join(f"{k}={'met' if v else 'MISSED'}" for k, v in row.get("goal_met", {}).items())
        if "vs_best_peer" in row:
            goals = f"best peer {row['best_peer']} {row['vs_best_peer']:.2f}x" + (f"; {goals}" if goals else "")
        lines.append(
            f"{label:44s} {row['kernel_graph_us']:10.2f} {row['baseline_graph_us']:10.2f} "
            f"{row['speedup']:8.2f} {row['floor_ratio']:8.2f}  {goals}"
        )
        if row.get("floor_formula"):
            lines.append(f"    {row['floor_formula']}")
    return lines


def write_ratios(document: Mapping, path: str, source: str) -> None:
    """Write the pairs and references of ``document`` to ``path`` (``<stem>.ratios.json``)."""
    with open(path, "w") as fh:
        json.dump({"source": source, "pairs": pair_ratios(document), "references": reference_rows(document)},
                  fh, indent=1)
        fh.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Print and write the ratios of each results file; 2 when none is given or one cannot be read."""
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("usage: python -m harness.bench.cases.ratios RESULT.json...", file=sys.stderr)
        return 2
    status = 0
    for path in paths:
        try:
            with open(path) as fh:
                document = json.load(fh)
            rows = pair_ratios(document)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"ratios: {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 2
            continue
        out = os.path.splitext(path)[0] + ".ratios.json"
        write_ratios(document, out, os.path.basename(path))
        print(f"{path} ({document.get('device', {}).get('name', '?')})")
        print("\n".join(format_rows(rows)))
        print(f"ratios: written to {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
