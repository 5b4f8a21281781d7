"""GPU test of the benchmark runner: the baseline copy runs, its line is printed, and the results document and its
summary are written with its efficiency and the machine's copy bandwidth measured. How fast the copy is, is the
bench's to report (its document and summary), not a test's to bound."""

from __future__ import annotations

import json
import math

import pytest

from harness.bench import main
from harness.bench.results import validate_result

pytestmark = pytest.mark.gpu


def test_bench_baseline_end_to_end(tmp_path, capsys):
    assert main(["--family", "baseline", "--case", "copy_64m", "--out", str(tmp_path), "--warmup", "2", "--reps", "10"]) == 0
    [path] = list(tmp_path.glob("bench-*[0-9]Z.json"))
    document = json.loads(path.read_text())
    validate_result(document)
    assert document["status"] == "complete" and document["selected"] == ["baseline/copy_64m"]
    [case] = document["cases"]
    assert case["setup_s"] >= 0 and case["timed_s"] > 0
    out = capsys.readouterr().out
    assert "[1/1] baseline/copy_64m" in out and path.with_suffix(".md").read_text() in out
    assert case["l2_cold"]
    assert math.isfinite(case["efficiency"]["graph"]) and case["efficiency"]["graph"] > 0, case
    assert math.isfinite(document["machine"]["copy_bandwidth_bytes_per_s"])
    assert document["machine"]["copy_bandwidth_bytes_per_s"] > 0
