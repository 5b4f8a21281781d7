"""CPU tests of the bench report: the summary's tables carry the JSON's numbers (read back from the Markdown),
the plots are drawn at screen size, the comparison's ratios, and the report command's exit codes."""

from __future__ import annotations

import json

import pytest
from bench_documents import (
    STORED_EARLIER_RUN, STORED_RUN, TP2_SWEEP, markdown_tables, section, small_document,
)

from harness.bench import report
from harness.bench.compare import compare, compare_markdown
from harness.bench.plot import plot_results
from harness.bench.summary import summary_markdown


def _case(document: dict, family: str, name: str) -> dict:
    """The entry ``family/name`` of ``document``, looked up directly (not through the report's code)."""
    [found] = [c for c in document["cases"] if c["family"] == family and c["name"] == name]
    return found


def _cell(value: float) -> str:
    """How the summary writes a time or a ratio."""
    return f"{value:.2f}"


def test_allreduce_table_lines_carry_the_json_medians(document):
    text = summary_markdown(document)
    [plain] = markdown_tables(section(text, "allreduce_mhc"))
    assert [(r["tp"], r["H"], r["M"]) for r in plain] == [("2", "5120", "1"), ("2", "5120", "8"), ("2", "5120", "64"),
                                                         ("4", "5120", "1"), ("4", "5120", "128")]
    for row in plain:
        prefix = f"tp{row['tp']}_h{row['H']}_m{row['M']}"
        for column, impl in (("LL", "ll"), ("BT", "bt"), ("unfused", "unfused")):
            if row[column] == "-":
                assert not any(c["name"] == f"{prefix}_{impl}" for c in document["cases"]), (prefix, impl)
                continue
            assert row[column] == _cell(_case(document, "allreduce_mhc", f"{prefix}_{impl}")["graph"]["median_us"])
        ll = _case(document, "allreduce_mhc", f"{prefix}_ll")
        assert row["floor"] == _cell(ll["floor_us"]["graph"])
        fastest = min(c["graph"]["median_us"] for c in document["cases"] if c["name"] in (f"{prefix}_ll", f"{prefix}_bt"))
        unfused = _case(document, "allreduce_mhc", f"{prefix}_unfused")["graph"]["median_us"]
        assert row["unfused / best"] == _cell(unfused / fastest)
    # FlashInfer's figure only where it was published at that tp, H and M (also when only its note says so).
    assert [r["FlashInfer"] for r in plain] == ["-", "-", "-", "4.09", "9.30"]


def test_allreduce_crossover_is_stated(document):
    text = section(summary_markdown(document), "allreduce_mhc")
    assert "- LL/BT crossover, tp 2, H 5120, plain: BT ahead from M = 64 on" in text
    for rows, ll, bt, *_ in TP2_SWEEP:
        assert (bt < ll) == (rows == 64)
    document["cases"] = [c for c in document["cases"] if not (c["name"].endswith("_m64_bt"))]
    assert "BT never stays ahead: LL only" in summary_markdown(document)


def test_loop_table_pairs_kernel_and_eager_loop(document):
    [table] = markdown_tables(section(summary_markdown(document), "markov_fused"))
    assert [(r["rows"], r["steps"]) for r in table] == [("1", "1"), ("8", "8")]
    for row in table:
        name = f"r{row['rows']}_s{row['steps']}_v129280_tp1"
        kernel, eager = _case(document, "markov_fused", name), _case(document, "markov_fused", f"{name}_eager")
        k, e = kernel["graph"]["median_us"], eager["graph"]["median_us"]
        assert (row["kernel"], row["eager"], row["speedup"]) == (_cell(k), _cell(e), _cell(e / k))
        assert (row["floor"], row["x floor"]) == (_cell(kernel["floor_us"]["graph"]), _cell(k / kernel["floor_us"]["graph"]))
    assert table[1]["goals"] == "speedup >= 3.0: met; x floor <= 2.0: MISSED"


def test_header_says_device_versions_bandwidth_and_command(document):
    head = summary_markdown(document).split("\n## ")[0]
    assert "NVIDIA H200" in head and "torch 2.11.0+cu130" in head and "CuTe DSL 4.8.1" in head
    assert "git 0123456+dirty" in head
    assert "copy bandwidth 4233 GB/s" in head
    assert "`python -m harness bench --reps 20`" in head
    assert f"status: complete, {len(document['cases'])} cases measured, 0 failed" in head


def test_failures_and_unreached_cases_close_the_page(document):
    document["failed"].append({"case": "markov_fused/r8_s1_v129280_tp1", "error": "BenchSanityError: row 0"})
    document.update(status="interrupted", not_run=["markov_sharded/r8_s8_v129280_w8"])
    text = summary_markdown(document)
    assert "- markov_fused/r8_s1_v129280_tp1: BenchSanityError: row 0" in section(text, "Failed")
    assert "markov_sharded/r8_s8_v129280_w8" in section(text, "Not reached")
    assert "status: interrupted" in text and "1 failed, 1 not reached" in text


def test_stored_run_tables_match_its_json():
    with open(STORED_RUN) as fh:
        document = json.load(fh)
    text = summary_markdown(document)
    plain, finalize = markdown_tables(section(text, "allreduce_mhc"))
    assert len(plain) == 14 and len(finalize) == 12
    cells = {(r["tp"], r["H"], r["M"]): r for r in plain}
    for case in document["cases"]:
        p = case["params"]
        if case["family"] == "allreduce_mhc" and p["source"] == "plain":
            column = {"ll": "LL", "bt": "BT", "unfused": "unfused"}[p["impl"]]
            # A time whose inputs did not reach twice the L2 carries the mark saying so.
            expected = _cell(case["graph"]["median_us"]) + ("" if case["l2_cold"] else "w")
            assert cells[(str(p["tp"]), str(p["hidden"]), str(p["rows"]))][column] == expected
    [sharded] = markdown_tables(section(text, "markov_sharded"))
    assert [r["ranks"] for r in sharded] == ["1", "8"]
    assert sharded[0]["kernel"] == _cell(_case(document, "markov_sharded", "r8_s8_v129280_w1")["graph"]["median_us"])


def test_plots_one_per_family_at_screen_size(document, tmp_path):
    import matplotlib.image

    paths = plot_results(document, str(tmp_path / "bench-x"))
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == ["bench-x.allreduce_mhc.png", "bench-x.markov_fused.png"]
    for path in paths:
        height, width = matplotlib.image.imread(path).shape[:2]
        assert (width, height) == (1200, 700), path
        assert (tmp_path / path.rsplit("/", 1)[1]).stat().st_size > 20_000, "an empty canvas is a few KB"


def test_without_matplotlib_no_plot_and_a_note(document, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        """Refuse matplotlib as if it were not installed."""
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    written = report.write_report(document, str(tmp_path))
    assert written["plots"] == [] and "matplotlib is not importable" in written["plot_note"]
    assert (tmp_path / "bench-20261130T100000Z.md").exists()


def test_compare_ratios_and_unmatched_cases(document):
    old = small_document()
    new = document
    target = _case(new, "markov_fused", "r8_s8_v129280_tp1")
    target["graph"]["median_us"] = 0.5 * target["graph"]["median_us"]
    target["eager"]["median_us"] = 1.25 * target["eager"]["median_us"]
    new["cases"] = [c for c in new["cases"] if c["name"] != "copy_4m"]
    new["cases"].append(small_document()["cases"][0] | {"name": "tp2_h5120_m1_new"})
    result = compare(old, new)
    row = next(r for r in result["matched"] if r["case"] == "markov_fused/r8_s8_v129280_tp1")
    assert row["graph_ratio"] == pytest.approx(0.5) and row["eager_ratio"] == pytest.approx(1.25)
    assert all(r["graph_ratio"] == pytest.approx(1.0) for r in result["matched"] if r is not row)
    assert result["only_old"] == ["baseline/copy_4m"] and result["only_new"] == ["allreduce_mhc/tp2_h5120_m1_new"]
    text = compare_markdown(old, new, "OLD.json", "NEW.json")
    [table] = markdown_tables(text)
    line = next(r for r in table if r["case"] == "markov_fused/r8_s8_v129280_tp1")
    assert (line["graph new/old"], line["eager new/old"]) == ("0.500", "1.250")
    assert "- only in old (1):\n  - baseline (1): copy_4m" in text
    assert "- only in new (1):\n  - allreduce_mhc (1): tp2_h5120_m1_new" in text


def test_report_command_rebuilds_summary_and_plots(document_path, tmp_path, capsys):
    out = tmp_path / "rendered"
    assert report.main([document_path, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    written = (out / "bench-20261130T100000Z.md").read_text()
    assert written in printed and "## allreduce_mhc" in written
    assert sorted(p.name for p in out.glob("*.png")) == ["bench-20261130T100000Z.allreduce_mhc.png",
                                                        "bench-20261130T100000Z.markov_fused.png"]


def test_report_command_exit_codes(document_path, tmp_path, capsys):
    assert report.main([]) == 2
    assert "give either RESULT.json [--previous DIR] or --compare" in capsys.readouterr().err
    assert report.main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "rankcheck-bench/1"}))
    assert report.main([str(bad)]) == 2
    assert "command is missing" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps(small_document() | {"cases": [small_document()["cases"][0] | {"name": "elsewhere"}]}))
    assert report.main(["--compare", document_path, str(other)]) == 2
    assert "no case in common" in capsys.readouterr().err
    assert report.main(["--compare", STORED_EARLIER_RUN, STORED_RUN]) == 0
    assert "markov_fused/r8_s8_v129280_tp1 |" in capsys.readouterr().out


def test_a_peer_that_failed_its_golden_check_is_timed_marked_and_never_compared():
    # Issue 43: the symmetric-memory peer at tp 4 differed from the golden bits by ~30,600 ulps while its ratio was
    # printed beside ours. Here one-shot is wrong (plausible False) and two-shot right: best peer / best compares
    # against two-shot only; with two-shot gone there is no ratio at all.
    from bench_documents import allreduce

    from harness.bench import tables

    def peer(impl, graph, plausible):
        case = allreduce(4, 5120, 1, impl, graph, 1.0)
        case["params"].update(plausible=plausible, golden_ulp={"residual_out": {"max_ulp": 30600 if not plausible else 0},
                                                              "layer_input": {"max_ulp": 0}}, held_to="1 ulp")
        return case

    ll = allreduce(4, 5120, 1, "ll", 6.0, 1.0)
    wrong, right = peer("symm_one_shot", 3.0, False), peer("symm_two_shot", 9.0, True)
    document = {**small_document(), "cases": [ll, wrong, right]}
    [row] = tables.allreduce_rows(document, "allreduce_mhc")
    assert row["best_peer_name"] == "symm_two_shot" and row["vs_peer"] == 9.0 / 6.0
    assert row["marks"]["symm_one_shot"] == tables.WRONG_MARK and row["symm_one_shot"] == 3.0
    text = summary_markdown(document)
    assert f"3.00{tables.WRONG_MARK}" in text and "no ratio is taken against them" in text
    [row] = tables.allreduce_rows({**document, "cases": [ll, wrong]}, "allreduce_mhc")
    assert row["vs_peer"] is None and row["best_peer_name"] is None


def test_ll_timed_per_rank_chain_gets_its_own_columns_and_floor_ratio():
    # Issue 43: the lockstep join of the virtual ranks' streams costs 1-9 us a call; LL timed with each rank's calls
    # back to back (graph_chained) stands beside it, with its own distance to the floor. Without it: no such columns.
    from bench_documents import allreduce, markdown_tables, summary_of

    from harness.bench import tables
    from harness.bench.summary import CHAINED_HEADERS

    ll, bt = allreduce(2, 5120, 1, "ll", 6.0, 1.5), allreduce(2, 5120, 1, "bt", 8.0, 1.5)
    ll["graph_chained"] = summary_of(4.5)
    document = {**small_document(), "cases": [ll, bt]}
    [row] = tables.allreduce_rows(document, "allreduce_mhc")
    assert row[tables.CHAINED] == 4.5 and row["x_floor_chained"] == 4.5 / 1.5 and row["x_floor"] == 6.0 / 1.5
    [table] = [t for t in markdown_tables(summary_markdown(document)) if t and "LL" in t[0]]
    assert (table[0][CHAINED_HEADERS[0]], table[0][CHAINED_HEADERS[1]]) == ("4.50", "3.00")
    del ll["graph_chained"]
    [table] = [t for t in markdown_tables(summary_markdown(document)) if t and "LL" in t[0]]
    assert CHAINED_HEADERS[0] not in table[0]
