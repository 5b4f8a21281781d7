"""Small bench results documents built in the tests (schema ``rankcheck-bench/1``), and a Markdown table reader.

The document holds a few cases of each report layout: an all-reduce sweep
at tp 2 whose BT overtakes LL at the largest M (a crossover to mark), a tp 4
pair carrying FlashInfer figures (one with structured fields, one only in
its note, as older documents have them), a fused-loop pair with a goal, and
a copy baseline. Every median is distinct, so a number in the wrong cell
cannot pass for the right one.
"""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORED_RUN = os.path.join(ROOT, "tests", "data", "bench", "bench-20261129T122444Z.json")
STORED_EARLIER_RUN = os.path.join(ROOT, "tests", "data", "bench", "bench-20261129T091137Z.json")


def summary_of(median: float) -> dict:
    """A ``stats.summarize``-shaped summary around ``median``."""
    return {"n": 20, "median_us": median, "p10_us": 0.9 * median, "p90_us": 1.1 * median, "min_us": 0.8 * median,
            "max_us": 1.3 * median, "mean_us": median, "stdev_us": 0.05 * median}


def entry(family: str, name: str, params: dict, graph: float, eager: float, floor: float, references=()) -> dict:
    """One case entry with the given CUDA-graph and eager medians and graph floor."""
    return {
        "family": family, "name": name, "params": params, "description": "d", "references": list(references),
        "bytes_moved": 1_000_000, "input_bytes": 500_000, "input_sets": 200, "footprint_bytes": 100_000_000,
        "l2_cold": True, "calls_per_replay": 200, "kernels_per_call": 2,
        "graph": summary_of(graph), "eager": summary_of(eager),
        "floor_us": {"graph": floor, "eager": floor + 8.0},
        "efficiency": {"graph": floor / graph, "eager": (floor + 8.0) / eager},
    }


def allreduce(tp: int, hidden: int, rows: int, impl: str, graph: float, floor: float, references=()) -> dict:
    """An all-reduce case entry as ``harness/families/allreduce_mhc/bench.py`` declares them (plain source)."""
    params = {"tp": tp, "hidden": hidden, "rows": rows, "impl": impl, "protocol": impl, "source": "plain",
              "provider": "virtual", "note": "virtual ranks on one GPU: not a latency measurement of NVLink"}
    if impl != "unfused":
        params["baseline"] = f"tp{tp}_h{hidden}_m{rows}_unfused"
    return entry("allreduce_mhc", f"tp{tp}_h{hidden}_m{rows}_{impl}", params, graph, 400.0 + graph, floor, references)


TP4_M1_PUBLISHED = (
    {"source": "FlashInfer PR #5178; published, not measured here", "value_us": 4.09, "published": True,
     "note": "FlashInfer LL, H=5120, M=1, TP4", "tp": 4, "hidden": 5120, "rows": 1, "protocol": "ll"},
    {"source": "FlashInfer PR #5178; published, not measured here", "value_us": 4.81, "published": True,
     "note": "FlashInfer LL, H=5120, M=1, TP8", "tp": 8, "hidden": 5120, "rows": 1, "protocol": "ll"},
)
NOTE_ONLY_PUBLISHED = (
    {"source": "FlashInfer PR #5178; published, not measured here", "value_us": 9.3, "published": True,
     "note": "FlashInfer LL, H=5120, M=128, TP4 (about)"},
)
# (rows, LL, BT, unfused, floor) at tp 2, H 5120: BT is ahead at M 64 only.
TP2_SWEEP = ((1, 11.11, 13.13, 60.10, 1.01), (8, 12.12, 12.50, 70.20, 1.52), (64, 30.30, 20.20, 150.30, 4.77))


def small_document() -> dict:
    """A complete results document with every layout the report knows."""
    cases = []
    for rows, ll, bt, unfused, floor in TP2_SWEEP:
        cases += [allreduce(2, 5120, rows, "unfused", unfused, floor), allreduce(2, 5120, rows, "ll", ll, floor),
                  allreduce(2, 5120, rows, "bt", bt, floor)]
    cases += [
        allreduce(4, 5120, 1, "unfused", 77.03, 1.21), allreduce(4, 5120, 1, "ll", 29.82, 1.21, TP4_M1_PUBLISHED),
        allreduce(4, 5120, 128, "unfused", 386.99, 20.88),
        allreduce(4, 5120, 128, "ll", 63.64, 20.88, NOTE_ONLY_PUBLISHED),
    ]
    fused = {"vocab": 129280, "tp": 1}
    for rows, steps, kernel, eager, floor in ((8, 8, 250.47, 1145.97, 32.42), (1, 1, 29.15, 127.94, 17.34)):
        name = f"r{rows}_s{steps}_v129280_tp1"
        goal = {"goal": {"speedup_vs_eager": 3.0, "floor_ratio": 2.0}} if rows == 8 else {}
        cases.append(entry("markov_fused", name, {**fused, "rows": rows, "steps": steps, "impl": "kernel",
                                                  "baseline": f"{name}_eager", **goal}, kernel, 3 * kernel, floor))
        cases.append(entry("markov_fused", f"{name}_eager", {**fused, "rows": rows, "steps": steps,
                                                             "impl": "eager torch loop"}, eager, 2 * eager, floor))
    cases.append(entry("baseline", "copy_4m", {"bytes": 4 << 20}, 3.97, 6.83, 2.51))
    return {
        "schema": "rankcheck-bench/1",
        "command": ["python", "-m", "harness", "bench", "--reps", "20"],
        "date": "2026-11-30T10:00:00+00:00",
        "device": {"name": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "memory_bytes": 150109880320,
                   "l2_bytes": 62914560},
        "versions": {"python": "3.12.3", "torch": "2.11.0+cu130", "cuda": "13.0", "cutlass_dsl": "4.8.1",
                     "git": "0123456789abcdef+dirty"},
        "settings": {"warmup": 3, "reps": 20, "rotation_factor": 2.0, "launches": 256},
        "machine": {"copy_bandwidth_bytes_per_s": 4.2326e12, "copy_bytes": 1 << 30, "graph_launch_us": 0.527,
                    "eager_launch_us": 5.218},
        "status": "complete",
        "cases": cases,
        "failed": [],
    }


def markdown_tables(text: str) -> list[list[dict]]:
    """Every Markdown table in ``text``, as lists of rows keyed by the header cells."""
    found, lines = [], text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].startswith("| ") and index + 1 < len(lines) and lines[index + 1].startswith("|") \
                and set(lines[index + 1]) <= set("|-: "):
            header = [cell.strip() for cell in lines[index].strip("|").split("|")]
            rows, index = [], index + 2
            while index < len(lines) and lines[index].startswith("| "):
                rows.append(dict(zip(header, (cell.strip() for cell in lines[index].strip("|").split("|")))))
                index += 1
            found.append(rows)
        else:
            index += 1
    return found


def section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]
