"""GPU test of the benchmark runner: the baseline copy runs close to its floor,
its line is printed, and the results document and its summary are written."""

from __future__ import annotations

import json

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
    # A plain copy cannot beat the copy-bandwidth floor by more than noise, and should be near it.
    assert 0.5 < case["efficiency"]["graph"] < 1.1, case
    assert document["machine"]["copy_bandwidth_bytes_per_s"] > 1e11
