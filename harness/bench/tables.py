"""What the benchmark report says about each family, as rows of numbers (no formatting).

The summary (``harness.bench.summary``) and the plots (``harness.bench.plot``)
read the same rows from here, so a table and its figure cannot disagree.
Each family has a layout, which its bench module declares (``TABLE_LAYOUT``,
read with ``harness.bench.registry.family_hooks``; the method's own cases
are ``copy``, ``LAYOUTS``; any other gets ``generic``):

- ``allreduce`` (a two-protocol all-reduce): one row per source (plain, finalize, plain through
  torchrun), tp, H and M, in the nccl-tests spirit: the CUDA-graph medians
  of LL, BT, the unfused path (the eager baseline) and the peers of the
  torchrun cases (``PEERS``: PyTorch's symmetric-memory one-shot and
  two-shot all-reduce, NCCL; each followed by the same eager tail) at that
  size, the floor, FlashInfer's published figure where one was published
  at exactly that tp, H and M, and three ratios of the faster protocol
  (``best``): ``speedup`` = unfused / best, ``vs_peer`` = fastest peer /
  best, ``x_floor`` = best / floor; where the LL case was also timed with
  each rank's calls back to back on its stream (``graph_chained``, virtual
  ranks), ``ll_chained`` and ``x_floor_chained`` = ll_chained / floor. A
  cell's ``marks`` say how it was measured where that differs from the
  rest (``EAGER_MARK``: eager launches, not capturable; ``L2_MARK``: inputs
  that may have stayed in the L2; ``WRONG_MARK``: a peer whose outputs
  failed the golden sanity check there, which ``vs_peer`` never compares
  against: a peer that is not right is no comparison); an implementation
  the document lists as not available at that shape is in the row's
  ``unavailable`` (the summary writes ``n/a`` there). ``crossovers`` gives
  the LL/BT crossover of each (tp, H, source) by the rule that sets
  the kernels' thresholds (``crossover``; the family writes them into its
  thresholds table, ``harness/families/<family>/thresholds.py``).
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
from typing import Mapping, Sequence

from harness.bench.cases.ratios import pair_ratios
from harness.bench.registry import family_hooks

LAYOUTS = {"baseline": "copy"}  # the method's own cases (harness/bench/cases/baseline.py); families declare theirs
PEERS = ("symm_one_shot", "symm_two_shot", "nccl")
ALLREDUCE_IMPLS = ("ll", "bt", "unfused", *PEERS)
CHAINED = "ll_chained"  # LL's calls timed back to back per rank stream (``graph_chained``), beside lockstep LL
EAGER_MARK = "e"  # timed with eager launches: not capturable in a CUDA graph
L2_MARK = "w"  # input footprint below the rotation's target: may have been L2-resident
WRONG_MARK = "x"  # a peer whose outputs failed the golden sanity check there: timed, never compared
# Documents written before references carried tp/hidden/rows said so only in their note.
_NOTE_SHAPE = re.compile(r"H=(?P<hidden>\d+), M=(?P<rows>\d+), TP(?P<tp>\d+)")


def layout_of(family: str) -> str:
    """The report layout of ``family``: ``allreduce``, ``loop``, ``copy`` or ``generic``."""
    return {**LAYOUTS, **family_hooks("TABLE_LAYOUT")}.get(family, "generic")


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


def _impl_of(params: Mapping) -> str | None:
    """Which column an all-reduce entry fills: ``unfused``, a protocol or a peer; None for any other entry."""
    impl = "unfused" if params.get("impl") == "unfused" else params.get("protocol")
    return impl if impl in ALLREDUCE_IMPLS else None


def marks(case: Mapping) -> str:
    """How an entry's median was measured where that differs from the method (``EAGER_MARK``, ``L2_MARK``), and
    ``WRONG_MARK`` where its outputs failed the golden sanity check."""
    return (EAGER_MARK if "graph_mode" in case else "") + ("" if case.get("l2_cold", True) else L2_MARK) + (
        WRONG_MARK if failed_its_check(case) else "")


def failed_its_check(case: Mapping) -> bool:
    """Whether a case recorded that its outputs lie beyond the sanity tolerance of the golden bits (a peer that is
    not right: its time is shown, marked, and no ratio is taken against it)."""
    return case.get("params", {}).get("plausible") is False


def _new_row(key: tuple) -> dict:
    """An empty all-reduce row for ``(source, tp, hidden, rows)``."""
    return {"source": key[0], "tp": key[1], "hidden": key[2], "rows": key[3], **{name: None for name in ALLREDUCE_IMPLS},
            CHAINED: None, "floor": None, "flashinfer": None, "marks": {}, "unavailable": {}, "wrong": set()}


def allreduce_rows(document: Mapping, family: str) -> list[dict]:
    """One row per (source, tp, hidden, rows) of ``family``'s all-reduce cases, sorted: medians, floor, FlashInfer,
    ratios."""
    rows: dict[tuple, dict] = {}
    for case in family_cases(document, family):
        params = case["params"]
        impl = _impl_of(params)
        if impl is None:
            continue
        shape = (params["tp"], params["hidden"], params["rows"])
        key = (params.get("source", "plain"), *shape)
        row = rows.setdefault(key, _new_row(key))
        row[impl] = case["graph"]["median_us"]
        row["marks"][impl] = marks(case)
        if impl == "ll" and "graph_chained" in case:
            row[CHAINED] = case["graph_chained"]["median_us"]
        if failed_its_check(case):
            row["wrong"].add(impl)
        row["floor"] = row["floor"] if row["floor"] is not None else case["floor_us"]["graph"]
        if impl in ("ll", "bt") and row["flashinfer"] is None:
            row["flashinfer"] = _published_at(case, shape)
    for item in document.get("not_available", []):
        params = item.get("params") or {}
        impl = _impl_of(params) if item.get("family") == family else None
        if impl is not None:
            key = (params.get("source", "plain"), params["tp"], params["hidden"], params["rows"])
            rows.setdefault(key, _new_row(key))["unavailable"][impl] = item["why"]
    for row in rows.values():
        row.update(_ratios(row))
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0] != "plain", k[0], k[1], k[2], k[3]))]


def _ratios(row: Mapping) -> dict:
    """The row's best protocol, fastest peer and the ratios between them, the baseline and the floor (None where a
    side is missing); a peer that failed its golden check is no peer here."""
    kernels = [row[name] for name in ("ll", "bt") if row[name] is not None]
    peers = {name: row[name] for name in PEERS if row[name] is not None and name not in row["wrong"]}
    best = min(kernels) if kernels else None
    best_peer = min(peers, key=peers.get) if peers else None
    return {
        "best": best,
        "best_peer": peers[best_peer] if best_peer else None,
        "best_peer_name": best_peer,
        "speedup": row["unfused"] / best if best and row["unfused"] is not None else None,
        "vs_peer": peers[best_peer] / best if best and best_peer else None,
        "x_floor": best / row["floor"] if best and row["floor"] else None,
        "x_floor_chained": row[CHAINED] / row["floor"] if row[CHAINED] and row["floor"] else None,
    }


def crossover(rows: Sequence[int], ll_us: Sequence[float], bt_us: Sequence[float]) -> int | None:
    """The smallest ``rows[i]`` with BT faster there and at every larger row; None when BT never stays ahead."""
    order = sorted(range(len(rows)), key=lambda i: rows[i])
    found = None
    for i in reversed(order):
        if bt_us[i] < ll_us[i]:
            found = rows[i]
        else:
            break
    return found


def measurements(document: Mapping, family: str) -> dict[tuple, dict]:
    """``{(provider, tp, hidden, source): {rows: {protocol: graph median us}}}`` of ``family``'s LL and BT cases."""
    table: dict[tuple, dict] = {}
    for case in document.get("cases", []):
        params = case.get("params", {})
        if case.get("family") != family or params.get("protocol") not in ("ll", "bt"):
            continue
        key = (params.get("provider", "virtual"), params["tp"], params["hidden"], params.get("source", "plain"))
        table.setdefault(key, {}).setdefault(params["rows"], {})[params["protocol"]] = case["graph"]["median_us"]
    return table


def crossovers(document: Mapping, family: str) -> dict[tuple, int | None]:
    """``{(tp, hidden, source): smallest M from which BT stays ahead, or None}`` where both protocols of ``family``
    ran at some M."""
    found = {}
    for (_provider, tp, hidden, source), by_rows in sorted(measurements(document, family).items()):
        both = sorted(m for m, medians in by_rows.items() if {"ll", "bt"} <= set(medians))
        if both:
            found[(tp, hidden, source)] = crossover(both, [by_rows[m]["ll"] for m in both], [by_rows[m]["bt"] for m in both])
    return found


def loop_rows(document: Mapping, family: str) -> list[dict]:
    """One row per kernel case of ``family`` paired with its eager loop: rows, steps, ranks, medians, ratios, goals."""
    by_name = {case["name"]: case for case in family_cases(document, family)}
    params = {name: case["params"] for name, case in by_name.items()}
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
            "marks": {"kernel": marks(by_name[pair["case"]]), "eager": marks(by_name[pair["baseline"]])},
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


def floor_rules(document: Mapping, family: str) -> list[str]:
    """The distinct symbolic floor rules (``params["floor_rule"]``) that ``family``'s cases state."""
    return list(dict.fromkeys(case["params"]["floor_rule"] for case in family_cases(document, family)
                              if case["params"].get("floor_rule")))


def peer_checks(document: Mapping, family: str) -> dict[str, list[dict]]:
    """Per implementation of ``family``'s all-reduce that records its distance from the golden bits (``golden_ulp``):
    one row per shape with the largest BF16 ulp distance per output and whether it was within the sanity tolerance."""
    found: dict[str, list[dict]] = {}
    for case in family_cases(document, family):
        params = case["params"]
        if not params.get("golden_ulp") or _impl_of(params) is None:
            continue
        found.setdefault(_impl_of(params), []).append({
            "tp": params["tp"], "rows": params["rows"], "hidden": params["hidden"],
            "ulp": {name: value["max_ulp"] for name, value in params["golden_ulp"].items()},
            "plausible": params.get("plausible"), "held_to": params.get("held_to")})
    return found


def floor_formulas(document: Mapping, family: str) -> dict[str, list[str]]:
    """``{floor formula: the cases of family that have it}``, for the cases that state their floor terms."""
    found: dict[str, list[str]] = {}
    for case in family_cases(document, family):
        if case.get("floor_formula"):
            found.setdefault(case["floor_formula"], []).append(case["name"])
    return found
