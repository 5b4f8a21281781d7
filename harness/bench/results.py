"""The benchmark results document: its schema, its provenance, and where it is written.

One JSON document per run, under ``runs/bench/`` by default (``--out``), named
``bench-<UTC timestamp>.json``, rewritten after every case
(``ResultsWriter``), so an interrupted run keeps what finished; the summary
and the plots beside it come from ``harness.bench.report``. Schema
``rankcheck-bench/1``:

- ``schema``, ``command`` (the argv), ``date`` (ISO 8601 UTC), ``device``
  (name, capability, SM count, memory, L2 bytes), ``versions`` (python,
  torch, CUDA, CuTe DSL, git revision; null where unknown), ``settings``
  (warm-up and repetition counts, rotation factor).
- ``machine``: ``copy_bandwidth_bytes_per_s`` (device-to-device copy, read
  plus write, measured in this run), ``graph_launch_us`` and
  ``eager_launch_us`` (an empty kernel, per launch, in a CUDA graph and eagerly).
- ``cases``: per case ``family``, ``name``, ``params``, ``description``,
  ``references``, ``bytes_moved``, ``input_bytes``, ``input_sets``,
  ``footprint_bytes``, ``l2_cold`` (footprint >= factor x L2),
  ``calls_per_replay``, ``kernels_per_call``, ``graph`` and ``eager``
  (``harness.bench.stats.summarize`` of per-call microseconds),
  ``floor_us`` and ``efficiency`` (floor / median) for both modes.
- ``failed``: ``{"case" or "module", "error"}`` for what could not run.

Optional fields (absent in documents written before they existed):
``status`` (``running``, ``complete``, ``aborted`` after a lost CUDA
context, ``interrupted``), ``selected`` (the keys the run set out to
measure), ``not_run`` (selected keys never reached), ``wall_s`` (the run's
wall seconds, machine figures included, written at its end), and per case
``setup_s`` and ``timed_s`` (wall seconds of setup, and of everything the
runner did after it); ``not_available`` (``{"case", "why", "optional"}``:
a torchrun case that could not run here, or an implementation of one that
did not, then also with its ``family``, ``name`` and ``params``), and per case ``floor_terms`` and ``floor_formula`` (what the floor
counts), ``graph_mode`` (timed eagerly: not capturable).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from typing import Any, Mapping

import torch

from harness.reports.provenance import package_version

SCHEMA = "rankcheck-bench/1"
_NUMBER = (int, float)
_SUMMARY_FIELDS = ("n", "median_us", "p10_us", "p90_us", "min_us", "max_us", "mean_us", "stdev_us")
_TOP_FIELDS = {
    "schema": str,
    "command": list,
    "date": str,
    "device": dict,
    "versions": dict,
    "settings": dict,
    "machine": dict,
    "cases": list,
    "failed": list,
}
_MACHINE_FIELDS = ("copy_bandwidth_bytes_per_s", "graph_launch_us", "eager_launch_us")
_CASE_FIELDS = {
    "family": str,
    "name": str,
    "params": dict,
    "description": str,
    "references": list,
    "bytes_moved": int,
    "input_bytes": int,
    "input_sets": int,
    "footprint_bytes": int,
    "l2_cold": bool,
    "calls_per_replay": int,
    "kernels_per_call": int,
    "graph": dict,
    "eager": dict,
    "floor_us": dict,
    "efficiency": dict,
}


class ResultSchemaError(ValueError):
    """A results document does not follow ``rankcheck-bench/1``."""


def _expect(value: Any, kind, where: str) -> None:
    """Raise naming ``where`` unless ``value`` has type ``kind`` (bool is not a number)."""
    is_bool = isinstance(value, bool)
    ok = isinstance(value, kind) and not (is_bool and kind in (_NUMBER, int))
    if not ok:
        name = "number" if kind is _NUMBER else getattr(kind, "__name__", str(kind))
        raise ResultSchemaError(f"bench result: {where}: expected {name}, got {type(value).__name__} {value!r}")


def _require(mapping: Mapping, key: str, where: str) -> Any:
    """``mapping[key]``, or an error naming the missing field."""
    if key not in mapping:
        raise ResultSchemaError(f"bench result: {where}.{key} is missing" if where else f"bench result: {key} is missing")
    return mapping[key]


def validate_result(document: Mapping) -> None:
    """Raise ``ResultSchemaError`` naming the first field that does not follow the schema."""
    _expect(document, dict, "document")
    for key, kind in _TOP_FIELDS.items():
        _expect(_require(document, key, ""), kind, key)
    if document["schema"] != SCHEMA:
        raise ResultSchemaError(f"bench result: schema is {document['schema']!r}, expected {SCHEMA!r}")
    for key in _MACHINE_FIELDS:
        _expect(_require(document["machine"], key, "machine"), _NUMBER, f"machine.{key}")
    for index, case in enumerate(document["cases"]):
        where = f"cases[{index}]"
        _expect(case, dict, where)
        for key, kind in _CASE_FIELDS.items():
            _expect(_require(case, key, where), kind, f"{where}.{key}")
        for mode in ("graph", "eager"):
            for key in _SUMMARY_FIELDS:
                _expect(_require(case[mode], key, f"{where}.{mode}"), _NUMBER, f"{where}.{mode}.{key}")
            _expect(_require(case["floor_us"], mode, f"{where}.floor_us"), _NUMBER, f"{where}.floor_us.{mode}")
            _expect(_require(case["efficiency"], mode, f"{where}.efficiency"), _NUMBER, f"{where}.efficiency.{mode}")
    for key, kind in (("status", str), ("selected", list), ("not_run", list), ("wall_s", _NUMBER),
                      ("not_available", list)):
        if key in document:
            _expect(document[key], kind, key)
    for index, failure in enumerate(document["failed"]):
        _expect(failure, dict, f"failed[{index}]")
        _expect(_require(failure, "error", f"failed[{index}]"), str, f"failed[{index}].error")


def utc_now() -> str:
    """The current time as ISO 8601 UTC with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def git_revision(root: str | None = None) -> str | None:
    """The checkout's HEAD commit (with ``+dirty`` when the tree has changes), or None."""
    root = root or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def versions() -> dict:
    """Python, torch, CUDA, CuTe DSL and git revision of this run."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cutlass_dsl": package_version("nvidia-cutlass-dsl"),
        "git": git_revision(),
    }


def result_stem(date_iso: str) -> str:
    """The file stem for a run started at ``date_iso``: ``bench-YYYYmmddTHHMMSSZ``."""
    stamp = _dt.datetime.fromisoformat(date_iso).astimezone(_dt.timezone.utc)
    return "bench-" + stamp.strftime("%Y%m%dT%H%M%SZ")


def write_results(document: Mapping, out_dir: str) -> str:
    """Validate ``document`` and write it as ``<out_dir>/<stem>.json`` atomically; return the path."""
    validate_result(document)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, result_stem(document["date"]) + ".json")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(document, fh, indent=1, sort_keys=False)
        fh.write("\n")
    os.replace(tmp, path)
    return path


class ResultsWriter:
    """A run listener that keeps the document on disk: after the machine figures and after every case."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.path: str | None = None
        self.document: dict | None = None

    def machine_measured(self, document: dict) -> None:
        """Keep hold of the document and write it before any case runs (its stem is fixed by the start time)."""
        self.document = document
        self.path = write_results(document, self.out_dir)

    def case_started(self, document: dict, case) -> None:
        """Nothing to write before a case."""

    def case_finished(self, document: dict, case, entry: dict, failed: bool) -> None:
        """Rewrite the document with the case that just ended."""
        self.path = write_results(document, self.out_dir)
