"""CPU tests of ``python -m harness.bench.breakdown``: the table arithmetic on a synthetic stamp buffer, the
per-kind sums over steps, missing stamps, the medians over launches, and the refusals (no GPU, a family
without stamps)."""

from __future__ import annotations

import pytest
import torch

from golden.families import FAMILIES
from harness.bench import breakdown
from kernels.markov_sharded.layout import stamp_names


def _buffer(steps: int, ctas: int, offset: int = 0) -> list[list[int]]:
    """Stamps where CTA c starts at 1000 + 10 c + offset and phase k lasts 100 k ns."""
    names = stamp_names(steps)
    rows = []
    for c in range(ctas):
        t, row = 1000 + 10 * c + offset, []
        for k in range(len(names)):
            t += 100 * k
            row.append(t)
        rows.append(row)
    return rows


def test_phase_table_medians_extremes_shares_and_critical_path():
    names = ("start", "a", "b")
    stamps = [[0 + 5, 105, 405], [10, 130, 410], [20, 120, 520]]
    table = breakdown.phase_table(names, stamps)
    a, b = table["phases"]
    assert (a["phase"], a["median_ns"], a["min_ns"], a["max_ns"]) == ("a", 100, 100, 120)
    assert (b["phase"], b["median_ns"], b["min_ns"], b["max_ns"]) == ("b", 300, 280, 400)
    assert table["cta_span_ns"] == 400 and table["ctas"] == 3
    assert a["share"] == pytest.approx(100 / 400) and b["share"] == pytest.approx(300 / 400)
    assert table["critical_path_ns"] == 520 - 5


def test_kind_table_sums_each_kind_over_the_steps():
    steps = 2
    names = stamp_names(steps)
    table = breakdown.kind_table(names, _buffer(steps, 4))
    kinds = [p["phase"] for p in table["phases"]]
    assert kinds == ["setup", "resident", "streamed", "fold", "wait", "next", "copy", "end"]
    by = {p["phase"]: p["median_ns"] for p in table["phases"]}
    # Phase k (ending stamp k) lasts 100 k: resident is stamp 2 of step 0 and 7 of step 1.
    assert by["setup"] == 100 and by["resident"] == 100 * (2 + 7) and by["wait"] == 100 * (5 + 10)
    assert by["end"] == 100 * (len(names) - 1)
    assert sum(by.values()) == table["cta_span_ns"]
    assert sum(p["share"] for p in table["phases"]) == pytest.approx(1.0)
    assert table["critical_path_ns"] == table["cta_span_ns"] + 30


def test_a_missing_stamp_lasts_zero_and_a_bad_shape_is_refused():
    table = breakdown.phase_table(("start", "a", "b"), [[10, 0, 50]])
    assert [p["median_ns"] for p in table["phases"]] == [0, 40]
    with pytest.raises(ValueError, match="expected"):
        breakdown.phase_table(("start", "a"), [[1, 2, 3]])


def test_launches_take_the_median_of_each_field():
    names = stamp_names(1)
    launches = [_buffer(1, 2), _buffer(1, 2, offset=7), [[v * 3 for v in row] for row in _buffer(1, 2)]]
    result = breakdown.summarize_launches(names, launches, [10.0, 30.0, 20.0])
    assert result["launches"] == 3 and result["call_us_median"] == 20.0
    assert result["by_phase"]["phases"][0]["median_ns"] == 100  # the two unscaled launches
    assert [p["phase"] for p in result["by_phase"]["phases"]] == list(names[1:])
    text = breakdown.format_table(result["by_kind"], "title")
    assert text.splitlines()[0] == "title" and "critical path" in text and "streamed" in text


@pytest.mark.parametrize("family", FAMILIES)
def test_without_a_gpu_it_exits_2_saying_so(monkeypatch, capsys, family):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert breakdown.main(["--family", family, "--reps", "2"]) == 2
    assert "needs a GPU" in capsys.readouterr().err


def test_fused_slots_follow_a_cta_through_the_steps():
    """A fused slot's stamps, step by step: ``between`` is the gap since the slot's previous step."""
    from kernels.markov_fused.layout import STEP_STAMPS, step_stamp_names

    names = step_stamp_names(2)
    assert names[0] == "s0.between" and len(names) == 2 * len(STEP_STAMPS)
    # Step 0 from 0: ready 10, scored 50, arrived 60, finish 70; the GEMV to 1070; step 1 the same.
    one = [0, 10, 50, 60, 70]
    row = one + [v + 1070 for v in one]
    table = breakdown.kind_table(names, [row, row])
    by = {p["phase"]: p["median_ns"] for p in table["phases"]}
    assert by == {"ready": 20, "scored": 80, "arrived": 20, "finish": 20, "between": 1000}
    assert table["critical_path_ns"] == 1140


def test_bad_sizes_are_refused_before_anything_runs(capsys):
    assert breakdown.main(["--family", "allreduce_mhc", "--rows", "0"]) == 2
    assert "--rows" in capsys.readouterr().err
    assert breakdown.main(["--family", "markov_fused", "--world", "8"]) == 2
