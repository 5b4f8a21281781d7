"""The LL/BT crossover rule and the thresholds table the all-reduce reads (harness.families.allreduce_mhc.thresholds)."""

import json
import os
import re

import pytest

from harness.families.allreduce_mhc.thresholds import arch_of, crossover, derive, main
from kernels.allreduce_mhc.protocol_rows import measured_threshold


def test_crossover_needs_bt_ahead_from_there_on():
    rows = [1, 8, 16, 32, 64, 128]
    assert crossover(rows, [5, 6, 7, 9, 12, 20], [8, 9, 8, 8, 10, 14]) == 32
    # A BT win at 8 followed by a loss at 16 is noise, not a crossover.
    assert crossover(rows, [5, 6, 7, 9, 12, 20], [8, 5, 8, 8, 10, 14]) == 32
    assert crossover(rows, [1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2]) is None
    assert crossover(rows, [9] * 6, [1] * 6) == 1
    assert crossover(list(reversed(rows)), [20, 12, 9, 7, 6, 5], [14, 10, 8, 8, 9, 8]) == 32
    assert crossover(rows, [5] * 6, [5] * 6) is None  # a tie keeps LL


def _case(tp, hidden, rows, protocol, source, median):
    """A results entry reduced to what the derivation reads."""
    return {"family": "allreduce_mhc", "name": f"tp{tp}_h{hidden}_m{rows}_{source}_{protocol}",
            "params": {"tp": tp, "hidden": hidden, "rows": rows, "protocol": protocol, "source": source,
                       "provider": "virtual"},
            "graph": {"median_us": median}}


def _document():
    """Plain and finalize LL/BT medians at tp 2, H 5120, an LL-only shape, and an unrelated case."""
    cases = []
    for m, ll, bt in ((1, 5.0, 8.0), (32, 9.0, 8.5), (128, 20.0, 12.0)):
        cases += [_case(2, 5120, m, "ll", "plain", ll), _case(2, 5120, m, "bt", "plain", bt)]
    for m, ll, bt in ((1, 6.0, 9.0), (32, 10.0, 11.0), (128, 25.0, 13.0)):
        cases += [_case(2, 5120, m, "ll", "finalize", ll), _case(2, 5120, m, "bt", "finalize", bt)]
    cases.append(_case(4, 5120, 1, "ll", "plain", 7.0))
    cases.append({"family": "markov_fused", "name": "x", "params": {}, "graph": {"median_us": 1.0}})
    return {"device": {"name": "NVIDIA H200", "capability": "9.0"}, "date": "2026-11-29T12:00:00+00:00",
            "cases": cases}


def test_derive_and_the_host_reads_what_was_written(tmp_path, capsys):
    entries = derive(_document(), "runs/bench/bench-x.json")
    assert list(entries) == ["sm_90a/virtual/tp2/h5120"]  # tp 4 timed LL only: no entry
    entry = entries["sm_90a/virtual/tp2/h5120"]
    assert (entry["bt_min_rows"], entry["bt_min_finalize_rows"]) == (32, 128)
    assert entry["measured"]["plain"] == {"rows": [1, 32, 128], "ll_us": [5.0, 9.0, 20.0], "bt_us": [8.0, 8.5, 12.0]}
    result = tmp_path / "bench-x.json"
    result.write_text(json.dumps(_document()))
    table = tmp_path / "thresholds.json"
    table.write_text(json.dumps({"sm_100a/symmetric/tp8/h7168": {"bt_min_rows": 64}}))
    assert main([str(result), "--into", str(table)]) == 0
    assert "bt_min_rows=32 bt_min_finalize_rows=128" in capsys.readouterr().out
    merged = json.loads(table.read_text())
    assert set(merged) == {"sm_100a/symmetric/tp8/h7168", "sm_90a/virtual/tp2/h5120"}
    read, why = measured_threshold("sm_90a", "virtual", 2, 5120, [str(table)])
    assert read["bt_min_rows"] == 32 and "bench-x.json" in why
    assert measured_threshold("sm_90a", "symmetric", 2, 5120, [str(table)])[0] is None


def test_nothing_to_derive_is_an_error(tmp_path):
    doc = _document()
    doc["cases"] = [c for c in doc["cases"] if c["params"].get("protocol") != "bt"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert main([str(path), "--into", str(tmp_path / "t.json")]) == 2
    assert not (tmp_path / "t.json").exists()
    with pytest.raises(ValueError, match="compute capability 8.0"):
        arch_of("8.0")


def test_a_bench_run_merges_the_crossovers_it_measured(tmp_path, monkeypatch, capsys):
    """The bench's end (``_finish``) merges the document's measured crossovers into the thresholds file,
    keyed by platform; an interrupted run and a run without an LL/BT pair write nothing."""
    import harness.bench as bench
    from harness.bench import report, results

    written = tmp_path / "bench-x.json"
    monkeypatch.setattr(results, "write_results", lambda document, out_dir: str(written))
    monkeypatch.setattr(report, "write_report", lambda document, out_dir: {
        "text": "", "summary": "bench-x.md", "plots": [], "plot_note": None})
    document = {**_document(), "failed": [], "wall_s": 1.0}
    table = tmp_path / "thresholds.json"
    assert bench._finish(document, str(tmp_path), len(document["cases"]), True, thresholds_into=str(table)) == 130
    assert not table.exists()
    assert bench._finish(document, str(tmp_path), len(document["cases"]), False, thresholds_into=str(table)) == 0
    merged = json.loads(table.read_text())
    assert list(merged) == ["sm_90a/virtual/tp2/h5120"]
    entry = merged["sm_90a/virtual/tp2/h5120"]
    assert entry["bt_min_rows"] == 32 and entry["source"].endswith("bench-x.json")
    assert "merged 1 measured LL/BT crossovers" in capsys.readouterr().out
    other = tmp_path / "other.json"
    plain = {**document, "cases": [c for c in document["cases"] if c["family"] != "allreduce_mhc"]}
    assert bench._finish(plain, str(tmp_path), 1, False, thresholds_into=str(other)) == 0
    assert not other.exists()


def test_by_default_the_crossovers_go_to_the_user_cache_and_the_shipped_table_is_untouched(tmp_path, monkeypatch,
                                                                                          capsys):
    """With $HOME and $XDG_CACHE_HOME in a temporary directory, a bench run's end (``_finish`` without
    --thresholds-into) and the tool without --into merge into $XDG_CACHE_HOME/rankcheck/allreduce_thresholds.json,
    creating it, and leave kernels/allreduce_mhc/thresholds.json as it was; --thresholds-into names another file."""
    import harness.bench as bench
    from harness.bench import report, results
    from kernels.allreduce_mhc.protocol_rows import THRESHOLDS_FILE

    monkeypatch.delenv("RANKCHECK_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = tmp_path / "xdg" / "rankcheck" / "allreduce_thresholds.json"
    shipped = (open(THRESHOLDS_FILE, "rb").read(), os.stat(THRESHOLDS_FILE).st_mtime_ns)
    written = tmp_path / "bench-x.json"
    written.write_text(json.dumps(_document()))
    monkeypatch.setattr(results, "write_results", lambda document, out_dir: str(written))
    monkeypatch.setattr(report, "write_report", lambda document, out_dir: {
        "text": "", "summary": "bench-x.md", "plots": [], "plot_note": None})
    document = {**_document(), "failed": [], "wall_s": 1.0}
    assert bench._finish(document, str(tmp_path), len(document["cases"]), False) == 0
    assert f"into {cache}" in capsys.readouterr().out
    assert json.loads(cache.read_text())["sm_90a/virtual/tp2/h5120"]["bt_min_rows"] == 32
    cache.unlink()
    assert main([str(written)]) == 0
    assert list(json.loads(cache.read_text())) == ["sm_90a/virtual/tp2/h5120"]
    assert (open(THRESHOLDS_FILE, "rb").read(), os.stat(THRESHOLDS_FILE).st_mtime_ns) == shipped
    assert bench.build_parser().parse_args([]).thresholds_into is None
    named = tmp_path / "named.json"
    args = bench.build_parser().parse_args(["--thresholds-into", str(named)])
    assert bench._finish(document, str(tmp_path), len(document["cases"]), False, False, args.thresholds_into) == 0
    assert list(json.loads(named.read_text())) == ["sm_90a/virtual/tp2/h5120"]


def test_merging_into_a_table_that_is_not_one_names_it_and_keeps_it(tmp_path):
    from harness.families.allreduce_mhc.thresholds import merge_into

    table = tmp_path / "t.json"
    table.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(table))):
        merge_into(str(table), derive(_document(), "runs/bench/bench-x.json"))
    assert table.read_text() == "{not json"
