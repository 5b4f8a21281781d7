"""The worker's check of reference outputs against the golden store (record, check, mismatch, missing)."""

import torch

from golden.store import GoldenStore
from harness.families.catalog import Case
from harness.rank.golden_check import store_golden


def case() -> Case:
    """A golden-outcome case."""
    return Case("markov_sharded", "store_probe", "", (2,), "cpu", ("golden",), None, None, 1, None, None, "", ())


def test_record_then_check_then_differences(tmp_path):
    static = {"head": torch.arange(8, dtype=torch.float32)}
    inputs = [{"x": torch.ones(3)}]
    outputs = {"launch0.tokens": torch.tensor([1, 2], dtype=torch.int64)}
    assert store_golden("check", case(), 2, static, inputs, outputs, root=tmp_path)["status"] == "missing"
    assert store_golden("record", case(), 2, static, inputs, outputs, root=tmp_path)["status"] == "recorded"
    assert GoldenStore(tmp_path).path("markov_sharded").exists()
    assert store_golden("check", case(), 2, static, inputs, outputs, root=tmp_path)["status"] == "ok"
    changed = {"launch0.tokens": torch.tensor([1, 3], dtype=torch.int64)}
    res = store_golden("check", case(), 2, static, inputs, changed, root=tmp_path)
    assert res["status"] == "mismatch" and "launch0.tokens" in res["message"]
    res = store_golden("check", case(), 2, static, [{"x": torch.zeros(3)}], outputs, root=tmp_path)
    assert res["status"] == "input-changed"
    assert store_golden("check", case(), 4, static, inputs, outputs, root=tmp_path)["status"] == "missing"  # other world variant


def test_only_cpu_size_golden_cases_are_stored():
    from harness.wire.case_files import stored_case  # noqa: PLC0415

    gpu = Case("markov_sharded", "gpu_probe", "", (2,), "gpu", ("golden",), None, None, 1, None, None, "", ())
    err = Case("markov_sharded", "bad", "", (2,), "cpu", ("error",), None, None, 1, None, None, "", ())
    assert stored_case(case()) and not stored_case(gpu) and not stored_case(err)
