"""CPU tests of the all-reduce peers of the torchrun bench: the cases register, the rank code builds their
implementations, the not-available paths run for real (NCCL where ranks share a GPU, symmetric memory on a
device it refuses), the checks against the golden bits, and the summary of a results document that holds them."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

import pytest
import torch
import torch.distributed as dist
from bench_documents import entry, markdown_tables, section, small_document

from harness.bench import report
from harness.bench.cases import spawned
from harness.families.allreduce_mhc import bench as ar, bench_torchrun
from harness.bench.cases.checks import BenchSanityError, max_ulp_distance
from harness.bench.registry import REGISTRY, discover
from harness.bench.summary import summary_markdown
from harness.bench.torchrun import verdict
from harness.bench.torchrun_rank import NotAvailable, RankContext, _prepare_all, _time_all

PEER_NAMES = ("symm_one_shot", "symm_two_shot", "nccl")


@dataclass
class OneProcessFabric:
    """Stands for a ``SymmetricFabric`` of ``world`` ranks as seen by ``rank``: its collectives see only this rank."""

    world: int
    rank: int = 0
    device: torch.device = torch.device("cpu")

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's copy: this rank's only."""
        return tensor.unsqueeze(0)

    def barrier(self) -> None:
        """Nothing to wait for with one process."""


def _ctx(world: int = 2, *, sharing: int = 2, backend: str = "gloo") -> RankContext:
    """A CPU rank context of rank 0 in a world of ``world`` ranks, ``sharing`` of them per GPU."""
    return RankContext(OneProcessFabric(world), torch.device("cpu"), backend, sharing, sm_count=132, l2_bytes=60 << 20)


def _impls(ctx: RankContext, rows: int = 1) -> dict:
    """The rank's implementations of the case at ``rows``, by entry suffix."""
    return {impl.name.rsplit(f"_m{rows}_", 1)[1]: impl for impl in bench_torchrun._allreduce_impls(ctx, rows=rows)}


@pytest.fixture
def gloo_world_of_one(tmp_path):
    """A real gloo process group of one rank (the symmetric-memory peers look up its name), ended afterwards."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    yield
    dist.destroy_process_group()


def test_peer_cases_registered_at_tp_2_and_4():
    discover()
    for tp in (2, 4):
        for rows in (1, 8, 32, 128):
            (case,) = REGISTRY.cases(family="allreduce_mhc", name=f"torchrun_tp{tp}_h5120_m{rows}")
            assert (case.launcher, case.world, case.default) == ("torchrun", tp, False)
            assert "symm_mem one-shot and two-shot, NCCL" in case.description


def test_rank_builds_kernel_baseline_and_peers_in_order():
    impls = _impls(_ctx(4, sharing=4), rows=8)
    assert list(impls) == ["ll", "bt", "unfused", *PEER_NAMES]
    assert [impls[n].optional for n in impls] == [False, False, False, True, True, True]
    for name in ("ll", "bt"):
        assert impls[name].params["baseline"] == "torchrun_tp4_h5120_m8_unfused"
    for name in PEER_NAMES:
        params = impls[name].params
        assert params["peer"] is True and params["protocol"] == name and "baseline" not in params
    # Ranks sharing a GPU never set the thresholds of ranks that have their own.
    assert {impl.params["provider"] for impl in impls.values()} == {"symmetric-shared"}
    assert {impl.params["provider"] for impl in _impls(_ctx(2, sharing=1, backend="nccl")).values()} == {"symmetric"}
    assert impls["unfused"].params["floor_rule"] == ar.FLOOR_RULE


def test_nccl_peer_says_why_it_cannot_run():
    with pytest.raises(NotAvailable, match=r"^needs a GPU per rank \(2 ranks share one GPU here"):
        _impls(_ctx(2, sharing=2))["nccl"].prepare()
    with pytest.raises(NotAvailable, match="needs the NCCL backend"):
        _impls(_ctx(2, sharing=1, backend="gloo"))["nccl"].prepare()


def test_prepare_all_keeps_the_baseline_and_lists_the_peers_not_available(gloo_world_of_one):
    ctx = _ctx(2, sharing=2)
    impls = _impls(ctx)
    ready, unavailable = _prepare_all([impls[n] for n in ("unfused", *PEER_NAMES)], ctx.fabric, rank=0)
    assert [impl.name for impl, _ in ready] == ["torchrun_tp2_h5120_m1_unfused"]
    why = {record["name"].rsplit("_m1_", 1)[1]: record["why"] for record in unavailable}
    assert why["nccl"].startswith("needs a GPU per rank (2 ranks share one GPU here")
    for name in ("symm_one_shot", "symm_two_shot"):  # torch's own refusal, its exception's type and text
        assert why[name].startswith("RuntimeError: ") and "device type cpu" in why[name], why[name]
    assert all(record["optional"] and record["params"]["rows"] == 1 for record in unavailable)
    # The baseline ran its check for real: plausible, with its distance from the golden bits.
    (_, prepared), = ready
    params = impls["unfused"].params
    assert params["plausible"] is True and set(params["golden_ulp"]) == {"residual_out", "layer_input"}
    assert prepared.bytes_moved == ar.floor_bytes(tp=2, rows=1, hidden=5120)  # both ranks on this GPU


def test_a_required_implementation_that_fails_is_dropped_alone_and_named_failed():
    ctx = _ctx(2, sharing=2)
    impls = _impls(ctx)
    impls["ll"].prepare = lambda: (_ for _ in ()).throw(BenchSanityError("ll differs"))
    impls["unfused"].prepare = lambda: "baseline ready"
    ready, dropped = _prepare_all([impls["ll"], impls["unfused"]], ctx.fabric, rank=0)
    assert [(impl.name, prepared) for impl, prepared in ready] == [("torchrun_tp2_h5120_m1_unfused", "baseline ready")]
    (record,) = dropped
    assert (record["optional"], record["why"]) == (False, "BenchSanityError: ll differs")
    assert "BenchSanityError: ll differs" in record["traceback"]
    # The parent makes it a failure of the case (rank 1 says the other rank failed), not a missing peer.
    rank0 = {"status": "measured", "entries": [], "device": {}, "machine": {}, "unavailable": [], "failed": [record]}
    rank1 = {"status": "measured", "failed": [record | {"why": "it failed on another rank (that rank's result says why)"}]}
    out = verdict("allreduce_mhc/torchrun_tp2_h5120_m1", {0: rank0, 1: rank1}, 2, rc=0, timed_out=False, deadline_s=1)
    assert [f["error"] for f in out.failed] == ["rank 0: BenchSanityError: ll differs",
                                                "rank 1: it failed on another rank (that rank's result says why)"]
    assert out.unavailable == [] and all(f["case"].endswith(": torchrun_tp2_h5120_m1_ll") for f in out.failed)


def test_timing_failure_of_a_peer_is_reported_not_fatal():
    ctx = _ctx(2, sharing=2)
    impls = _impls(ctx)

    def time_one(prepared):
        """A timing that fails for the peer's prepared call only."""
        if prepared == "peer":
            raise RuntimeError("capture refused")
        return {"timing": prepared}

    ready = [(impls["unfused"], "unfused"), (impls["symm_two_shot"], "peer")]
    timed, unavailable = _time_all(ready, ctx.fabric, 0, time_one)
    assert [(impl.name, timing) for impl, _, timing in timed] == [("torchrun_tp2_h5120_m1_unfused", {"timing": "unfused"})]
    assert [(r["name"], r["why"]) for r in unavailable] == [("torchrun_tp2_h5120_m1_symm_two_shot",
                                                             "RuntimeError: capture refused")]
    timed, dropped = _time_all([(impls["ll"], "peer")], ctx.fabric, 0, time_one)
    assert timed == [] and [(r["optional"], r["why"]) for r in dropped] == [(False, "RuntimeError: capture refused")]


def test_judge_holds_the_kernel_to_the_bits_and_reports_a_peer():
    tp, rows, hidden = 2, 2, 5120
    weight = ar.make_weight(torch.device("cpu"), hidden)
    check = ar.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(7), tp=tp, rows=rows, hidden=hidden)
    golden = ar.golden_outputs(check, weight, tp=tp, hidden=hidden)
    exact = bench_torchrun._judge("c", golden, check, weight, golden, "bits")
    assert exact["golden_ulp"]["layer_input"] == {"max_ulp": 0, "differing": 0, "nan_mismatches": 0}
    assert exact["held_to"] == "the golden bits, every one" and "plausible" not in exact
    nudged = {name: value.clone() for name, value in golden.items()}
    flat = nudged["layer_input"].view(-1).view(torch.int16)
    flat[3] += 1  # the next representable BF16 value: one ulp
    with pytest.raises(BenchSanityError, match="layer_input .against the golden bits. differs in 1 of"):
        bench_torchrun._judge("c", nudged, check, weight, golden, "bits")
    found = bench_torchrun._judge("c", nudged, check, weight, golden, "report")
    assert found["plausible"] is True and found["golden_ulp"]["layer_input"]["max_ulp"] == 1
    flat[5] += 1000  # far beyond 4 ulps of the operands' magnitude
    found = bench_torchrun._judge("c", nudged, check, weight, golden, "report")
    assert found["plausible"] is False and "layer_input" in found["plausibility_error"]
    assert found["golden_ulp"]["layer_input"] == {"max_ulp": 1000, "differing": 2, "nan_mismatches": 0}
    with pytest.raises(BenchSanityError):
        bench_torchrun._judge("c", nudged, check, weight, golden, "tolerance")


def test_max_ulp_distance_counts_representable_steps():
    one = torch.tensor([1.0, -0.0, 1.0, float("nan"), 2.0], dtype=torch.bfloat16)
    other = torch.tensor([1.0078125, 0.0, -1.0, 3.0, float("nan")], dtype=torch.bfloat16)
    found = max_ulp_distance(one[:3], other[:3])
    assert found == {"max_ulp": 2 * 0x3F80, "differing": 2, "nan_mismatches": 0}
    assert max_ulp_distance(one[:2], other[:2])["max_ulp"] == 1  # +0 and -0 are one value
    assert max_ulp_distance(one[3:], other[3:]) == {"max_ulp": 0, "differing": 0, "nan_mismatches": 2}
    with pytest.raises(ValueError, match="two bfloat16 tensors of one shape"):
        max_ulp_distance(one, other.float())


def test_verdict_keeps_what_the_summary_needs_of_an_unavailable_peer():
    record = {"name": "torchrun_tp2_h5120_m1_nccl", "optional": True, "why": "needs a GPU per rank (x)",
              "params": {"tp": 2, "hidden": 5120, "rows": 1, "protocol": "nccl", "source": "plain (torchrun)"}}
    measured = {"status": "measured", "entries": [], "device": {}, "machine": {}, "unavailable": [record]}
    out = verdict("allreduce_mhc/torchrun_tp2_h5120_m1", {0: measured, 1: {"status": "measured"}}, 2, rc=0,
                  timed_out=False, deadline_s=1)
    (item,) = out.unavailable
    assert (item["family"], item["name"], item["params"], item["why"]) == (
        "allreduce_mhc", record["name"], record["params"], record["why"])


def _torchrun_entry(tp: int, rows: int, impl: str, graph: float, floor: float, **params) -> dict:
    """An all-reduce entry as the torchrun rank writes it."""
    base = {"tp": tp, "hidden": 5120, "rows": rows, "impl": impl, "protocol": impl, "source": "plain (torchrun)",
            "provider": "symmetric-shared", "launcher": "torchrun", "floor_rule": ar.FLOOR_RULE,
            "peer_group": f"torchrun_tp{tp}_h5120_m{rows}", **params}
    return entry("allreduce_mhc", f"torchrun_tp{tp}_h5120_m{rows}_{impl}", base, graph, graph + 50.0, floor)


def peer_document() -> dict:
    """The small document plus one torchrun shape: LL, BT, unfused, both symmetric-memory peers (two-shot timed
    eagerly, one-shot with inputs that stayed under the rotation target), NCCL not available."""
    document = small_document()
    ulp = {"residual_out": {"max_ulp": 1, "differing": 3, "nan_mismatches": 0},
           "layer_input": {"max_ulp": 2, "differing": 5, "nan_mismatches": 0}}
    held = bench_torchrun.HELD_TO["report"]
    one_shot = _torchrun_entry(2, 8, "symm_one_shot", 40.40, 3.03, peer=True, golden_ulp=ulp, plausible=True,
                               held_to=held)
    one_shot["l2_cold"] = False
    two_shot = _torchrun_entry(2, 8, "symm_two_shot", 50.50, 3.03, peer=True, golden_ulp=ulp, plausible=False,
                               held_to=held)
    two_shot["graph_mode"] = "eager launches: not capturable in a CUDA graph, the graph columns repeat them"
    document["cases"] += [
        _torchrun_entry(2, 8, "ll", 20.20, 3.03, baseline="torchrun_tp2_h5120_m8_unfused"),
        _torchrun_entry(2, 8, "bt", 25.25, 3.03, baseline="torchrun_tp2_h5120_m8_unfused"),
        _torchrun_entry(2, 8, "unfused", 80.80, 3.03), one_shot, two_shot]
    document["not_available"] = [{
        "case": "allreduce_mhc/torchrun_tp2_h5120_m8: torchrun_tp2_h5120_m8_nccl", "optional": True,
        "family": "allreduce_mhc", "name": "torchrun_tp2_h5120_m8_nccl", "why": spawned.NEEDS_OWN_GPU.format(sharing=2),
        "params": {"tp": 2, "hidden": 5120, "rows": 8, "impl": "nccl", "protocol": "nccl",
                   "source": "plain (torchrun)"}}]
    return document


def test_summary_puts_peers_ratios_and_reasons_side_by_side():
    from harness.bench import tables

    text = summary_markdown(peer_document())
    plain, torchrun = markdown_tables(section(text, "allreduce_mhc"))
    (row,) = torchrun
    assert (row["LL"], row["BT"], row["unfused"], row["floor"]) == ("20.20", "25.25", "80.80", "3.03")
    assert (row["symm-mem one-shot"], row["symm-mem two-shot"], row["NCCL"]) == ("40.40w", f"50.50e{tables.WRONG_MARK}", "n/a")
    assert (row["unfused / best"], row["best peer / best"], row["best / floor"]) == (
        f"{80.80 / 20.20:.2f}", f"{40.40 / 20.20:.2f}", f"{20.20 / 3.03:.2f}")
    assert "best peer / best" not in plain[0]  # the virtual-rank source has no peer, and says so
    assert "No peer at this source (best peer / best: none)" in text
    assert "- NCCL n/a (tp 2 M 8): not available: needs a GPU per rank (2 ranks share one GPU here" in text
    assert ("- symm-mem two-shot against the golden bits, largest BF16 ulp distance residual_out/layer_input (held to "
            "nothing (a peer summing in its own order); within 4 BF16 ulps of the operands' magnitude is plausible): "
            "tp 2 M 8: 1/2 (BEYOND the sanity tolerance: its times are marked `x` and no ratio is taken against them)") in text
    assert "- symm-mem one-shot against the golden bits" in text and "tp 2 M 8: 1/2\n" in text
    assert f"- floor: {ar.FLOOR_RULE}" in text
    head = text.split("\n## ")[0]
    assert "a time marked `w` did not reach that" in head and "(marked `e`) is timed the same way with eager" in head
    assert "at least 2 x the L2" in head and "after 3 warm-up replays, 20 replays are timed" in head
    assert "floor = bytes the call must move" in head and "best peer / best: the fastest peer over ours" in head
    assert "a peer's time marked `x` failed its golden sanity check there: no ratio is taken against it" in head
    assert "torchrun cases: every rank captures and replays its own graph" in head


def test_report_compares_with_the_previous_result_in_a_folder(tmp_path, capsys):
    kept, out = tmp_path / "kept", tmp_path / "out"
    kept.mkdir()
    older, newer = small_document(), peer_document()
    older["date"], newer["date"] = "2026-11-30T10:00:00+00:00", "2026-12-02T10:00:00+00:00"
    (kept / "bench-20261130T100000Z.json").write_text(json.dumps(older))
    new_path = tmp_path / "bench-20261202T100000Z.json"
    new_path.write_text(json.dumps(newer))
    assert report.main([str(new_path), "--out", str(out), "--previous", str(kept)]) == 0
    page = (out / "bench-compare-20261130T100000Z-20261202T100000Z.md").read_text()
    assert page in capsys.readouterr().out
    assert "- only in new (5):\n  - allreduce_mhc (5): torchrun_tp2_h5120_m8_ll" in page
    # Nothing earlier than the oldest: the summary is written, the comparison is not, and the exit says so.
    assert report.main([str(kept / "bench-20261130T100000Z.json"), "--out", str(out), "--previous", str(kept)]) == 2
    assert "no bench-<stamp>.json in" in capsys.readouterr().err
    assert (out / "bench-20261130T100000Z.md").exists()


def test_case_patterns_select_the_peer_comparison():
    from harness.bench import select

    discover()
    chosen, _ = select(None, "allreduce_mhc/torchrun_tp*", everything=False)
    assert sorted(c.name for c in chosen) == sorted(f"torchrun_tp{tp}_h5120_m{rows}"
                                                   for tp in (2, 4) for rows in (1, 8, 32, 128))
    both, _ = select(None, "allreduce_mhc/torchrun_tp2_*, allreduce_mhc/tp2_h5120_m[18]_ll", everything=False)
    assert [c.name for c in both][-2:] == ["tp2_h5120_m1_ll", "tp2_h5120_m8_ll"] and len(both) == 6
    none, why = select(None, "allreduce_mhc/torchrun_tp2_*,allreduce_mhc/torchrun_tp8_*", everything=False)
    assert none == [] and "no case 'torchrun_tp8_*' in allreduce_mhc" in why


def test_ratios_json_names_the_fastest_peer_beside_each_kernel(tmp_path):
    from harness.bench.cases.ratios import pair_ratios, write_ratios

    document = peer_document()
    rows = {row["case"]: row for row in pair_ratios(document)}
    ll, bt = rows["torchrun_tp2_h5120_m8_ll"], rows["torchrun_tp2_h5120_m8_bt"]
    assert (ll["best_peer"], ll["best_peer_graph_us"]) == ("torchrun_tp2_h5120_m8_symm_one_shot", 40.40)
    assert ll["vs_best_peer"] == pytest.approx(40.40 / 20.20) and bt["vs_best_peer"] == pytest.approx(40.40 / 25.25)
    assert ll["speedup"] == pytest.approx(80.80 / 20.20) and ll["floor_ratio"] == pytest.approx(20.20 / 3.03)
    assert "best_peer" not in rows["tp2_h5120_m8_ll"]  # virtual ranks: no peer measured beside them
    write_ratios(document, str(tmp_path / "r.json"), "r")
    stored = {row["case"]: row for row in json.loads((tmp_path / "r.json").read_text())["pairs"]}
    assert stored["torchrun_tp2_h5120_m8_ll"]["vs_best_peer"] == pytest.approx(2.0)


def test_a_peer_that_fails_its_check_is_not_timed_and_says_why():
    """A peer whose check call lies beyond the sanity bound raises ``NotAvailable`` before any timing (so the ranks
    agree to drop it); its distance stays in its params, and the reason names the ranks sharing a GPU."""
    from types import SimpleNamespace

    ctx = SimpleNamespace(fabric=SimpleNamespace(world=2), device=torch.device("cpu"), sharing=2)

    def wrong(inputs: dict, weight: torch.Tensor) -> dict:
        """The unfused outputs with one layer_input value moved 1000 BF16 ulps."""
        outputs = {name: value.clone() for name, value in ar.unfused(inputs, weight).items()}
        outputs["layer_input"].view(-1).view(torch.int16)[5] += 1000
        return outputs

    params: dict = {}
    with pytest.raises(NotAvailable, match=r"not timed: its outputs failed the golden sanity check \(2 ranks sharing "
                                           r"one GPU\): .*layer_input"):
        bench_torchrun._allreduce_prepared(ctx, rows=1, case="c", call=wrong, params=params, held="report")
    assert params["plausible"] is False and params["golden_ulp"]["layer_input"]["max_ulp"] >= 1000
    right = bench_torchrun._allreduce_prepared(ctx, rows=1, case="c", call=lambda i, w: ar.unfused(i, w),
                                               params={}, held="report")
    assert right.bytes_moved > 0
