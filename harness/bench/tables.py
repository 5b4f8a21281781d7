"""What the benchmark report says about each family, as rows of numbers (no formatting).

The summary (``harness.bench.summary``) and the plots (``harness.bench.plot``)
read the same rows from here, so a table and its figure cannot disagree.
Each family has a layout (``LAYOUTS``; any other family gets ``generic``):

- ``allreduce``: one row per source (plain, finalize), tp, H and M, in the
  nccl-tests spirit: the CUDA-graph medians of LL, BT and the unfused path
  at that size (and PyTorch's symmetric-memory one-shot all-reduce, a peer
  of the torchrun cases), the floor, and FlashInfer's published figure where one was
  published at exactly that tp, H and M, and the speedup of the faster
  protocol over the unfused path. ``crossovers`` gives the LL/BT
  crossover of each (tp, H, source) by the rule that sets the kernels'
  thresholds (``harness.bench.thresholds.crossover``).
- ``loop``: one row per kernel case that names a baseline (the eager torch
  loop), from ``harness.bench.cases.ratios.pair_ratios``: rows, steps, ranks,
  the kernel's and the loop's CUDA-graph medians, the speedup, the kernel's
  floor and its distance to it, the goals; ``floor_formulas`` gives each
  distinct floor formula with the cases it applies to.
- ``copy``: the method's own check, per copy: bytes, median, floor, efficiency.
- ``generic``: per case, both medians, the floor and the distance to it.

Every time is a per-call median in microseconds; a size that was not
measured is None.
"""

from __future__ import annotations

import re
from typing import Mapping

from harness.bench.cases.ratios import pair_ratios
from harness.bench.thresholds import FAMILY as ALLREDUCE_FAMILY
from harness.bench.thresholds import crossover, measurements

LAYOUTS = {ALLREDUCE_FAMILY: "allreduce", "markov_fused": "loop", "markov_sharded": "loop", "baseline": "copy"}
ALLREDUCE_IMPLS = ("ll", "bt", "unfused", "symm_mem")
# Documents written before references carried tp/hidden/rows said so only in their note.
_NOTE_SHAPE = re.compile(r"H=(?P<hidden>\d+), M=(?P<rows>\d+), TP(?P<tp>\d+)")


def layout_of(family: str) -> str:
    """The report layout of ``family``: ``allreduce``, ``loop``, ``copy`` or ``generic``."""
    return LAYOUTS.get(family, "generic")


def families(document: Mapping) -> list[str]:
    """The families that have at least one measured case, in the order they first appear."""
    return list(dict.fromkeys(case["family"] for case in document["cases"]))


def family_cases(document: Mapping, family: str) -> list[dict]:
    """The measured cases of ``family``, in document order."""
    return [case for case in document["cases"] if case["family"] == family]


def reference_shape(reference: Mapping) -> tuple | None:
    """``(tp, hidden, rows)`` a published reference applies to, from its fields or its note; None if unknown."""
    if all(key in reference for key in ("tp", "hidden", "rows")):
        return int(reference["tp"]), int(reference["hidden"]), int(reference["rows"])
    found = _NOTE_SHAPE.search(str(reference.get("note", "")))
    return (int(found["tp"]), int(found["hidden"]), int(found["rows"])) if found else None


def _published_at(case: Mapping, shape: tuple) -> float | None:
    """The first published LL figure among ``case``'s references whose shape is exactly ``shape``."""
    for reference in case["references"]:
        if reference.get("protocol", "ll") == "ll" and reference_shape(reference) == shape:
            return float(reference["value_us"])
    return None


def allreduce_rows(document: Mapping) -> list[dict]:
    """One row per (source, tp, hidden, rows) of the all-reduce cases, sorted, with LL/BT/unfused/floor/FlashInfer."""
    rows: dict[tuple, dict] = {}
    for case in family_cases(document, ALLREDUCE_FAMILY):
        params = case["params"]
        impl = params.get("protocol") if params.get("impl") != "unfused" else "unfused"
        if impl not in ALLREDUCE_IMPLS:
            continue
        shape = (params["tp"], params["hidden"], params["rows"])
        key = (params.get("source", "plain"), *shape)
        row = rows.setdefault(key, {"source": key[0], "tp": shape[0], "hidden": shape[1], "rows": shape[2],
                                    **{name: None for name in ALLREDUCE_IMPLS}, "floor": None, "flashinfer": None})
        row[impl] = case["graph"]["median_us"]
        row["floor"] = row["floor"] if row["floor"] is not None else case["floor_us"]["graph"]
        if impl != "unfused" and row["flashinfer"] is None:
            row["flashinfer"] = _published_at(case, shape)
    for row in rows.values():
        kernels = [row[name] for name in ("ll", "bt") if row[name] is not None]
        row["speedup"] = row["unfused"] / min(kernels) if row["unfused"] is not None and kernels else None
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0] != "plain", k[0], k[1], k[2], k[3]))]


def crossovers(document: Mapping) -> dict[tuple, int | None]:
    """``{(tp, hidden, source): smallest M from which BT stays ahead, or None}`` where both protocols ran at some M."""
    found = {}
    for (_provider, tp, hidden, source), by_rows in sorted(measurements(document).items()):
        both = sorted(m for m, medians in by_rows.items() if {"ll", "bt"} <= set(medians))
        if both:
            found[(tp, hidden, source)] = crossover(both, [by_rows[m]["ll"] for m in both], [by_rows[m]["bt"] for m in both])
    return found


def loop_rows(document: Mapping, family: str) -> list[dict]:
    """One row per kernel case of ``family`` paired with its eager loop: rows, steps, ranks, medians, ratios, goals."""
    params = {case["name"]: case["params"] for case in family_cases(document, family)}
    table = []
    for pair in pair_ratios(document):
        if pair["family"] != family or "error" in pair:
            continue
        case_params = params[pair["case"]]
        table.append({
            "case": pair["case"],
            "rows": case_params.get("rows"),
            "steps": case_params.get("steps"),
            "ranks": case_params.get("world", case_params.get("tp", 1)),
            "virtual": bool(case_params.get("virtual_ranks")),
            "kernel": pair["kernel_graph_us"],
            "eager": pair["baseline_graph_us"],
            "speedup": pair["speedup"],
            "floor": pair["floor_us"],
            "x_floor": pair["floor_ratio"],
            "goal": pair.get("goal", {}),
            "goal_met": pair.get("goal_met", {}),
        })
    return sorted(table, key=lambda row: (row["ranks"] or 0, row["rows"] or 0, row["steps"] or 0))


def unpaired_loop_errors(document: Mapping, family: str) -> list[str]:
    """Why a kernel case of ``family`` has no row: its baseline is missing from the document."""
    return [pair["error"] for pair in pair_ratios(document) if pair["family"] == family and "error" in pair]


def copy_rows(document: Mapping, family: str) -> list[dict]:
    """One row per case of ``family``: bytes moved, graph median, floor and efficiency."""
    return [{"case": case["name"], "bytes": case["bytes_moved"], "graph": case["graph"]["median_us"],
             "floor": case["floor_us"]["graph"], "efficiency": case["efficiency"]["graph"]}
            for case in family_cases(document, family)]


def generic_rows(document: Mapping, family: str) -> list[dict]:
    """One row per case of ``family``: both medians, the graph floor and the distance to it."""
    return [{"case": case["name"], "graph": case["graph"]["median_us"], "eager": case["eager"]["median_us"],
             "floor": case["floor_us"]["graph"], "x_floor": case["graph"]["median_us"] / case["floor_us"]["graph"]}
            for case in family_cases(document, family)]


def notes(document: Mapping, family: str) -> list[str]:
    """The distinct ``params["note"]`` texts of ``family``'s cases (what the numbers are not)."""
    return list(dict.fromkeys(case["params"]["note"] for case in family_cases(document, family)
                              if case["params"].get("note")))


def published(document: Mapping, family: str) -> list[dict]:
    """The distinct published references that ``family``'s cases carry (not measured here)."""
    seen: dict[tuple, dict] = {}
    for case in family_cases(document, family):
        for reference in case["references"]:
            seen.setdefault((reference.get("source"), reference.get("note"), reference.get("value_us")), reference)
    return list(seen.values())


def floor_formulas(document: Mapping, family: str) -> dict[str, list[str]]:
    """``{floor formula: the cases of family that have it}``, for the cases that state their floor terms."""
    found: dict[str, list[str]] = {}
    for case in family_cases(document, family):
        if case.get("floor_formula"):
            found.setdefault(case["floor_formula"], []).append(case["name"])
    return found
