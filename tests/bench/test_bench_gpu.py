"""GPU test of the benchmark runner: the baseline copy runs close to its floor
and the results document is written and valid."""

from __future__ import annotations

import json

import pytest

from harness.bench import main
from harness.bench.results import validate_result

pytestmark = pytest.mark.gpu


def test_bench_baseline_end_to_end(tmp_path):
    assert main(["--family", "baseline", "--case", "copy_64m", "--out", str(tmp_path), "--warmup", "2", "--reps", "10"]) == 0
    [path] = list(tmp_path.glob("bench-*.json"))
    document = json.loads(path.read_text())
    validate_result(document)
    [case] = document["cases"]
    assert case["l2_cold"]
    # A plain copy cannot beat the copy-bandwidth floor by more than noise, and should be near it.
    assert 0.5 < case["efficiency"]["graph"] < 1.1, case
    assert document["machine"]["copy_bandwidth_bytes_per_s"] > 1e11
