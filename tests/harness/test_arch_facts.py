"""Per-architecture arithmetic facts on the CPU: selection, NOT-AVAILABLE without facts, corrupt files, the probe's
bookkeeping.

The GPU is mocked where a test needs one (``harness.families.arch_facts.device_capability``);
the probe's measurements are stood in for by the golden's own functions (the
hardware cannot be reached here), so what is tested is the decision and the
files: which model fits, what a check's verdict says, and whether a re-run
reproduces, refuses or installs facts.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from golden import arch as golden_arch
from golden import fp32
from golden.comm import ThreadWorld
from golden.gumbel import draft_hash, draft_uniform, noised_scores
from golden.markov_fused import logit_transform
from golden.markov_sharded import BIAS_FUNCTIONS, hopper_mma_bias
from harness.wire.rank_result import RankResult
from harness import cli
from harness.families import arch_facts
from harness.rank import case_run
from harness.calibration import probe
from harness.calibration import fp32 as probe_fp32
from harness.calibration import mma as probe_mma
from harness.families import NotAvailable, adapter
from harness.reports.junit import junit_xml
from harness.wire.case_result import CaseResult

ROOT = Path(__file__).resolve().parents[2]
SM90 = ROOT / "golden" / "data" / "arch" / "sm_90.json"
SM90_TABLE = ROOT / "golden" / "data" / "rcp_f32_sm_90.json"
SHARDED_FIELDS = adapter("markov_sharded").arch_facts


@pytest.fixture
def gpu(monkeypatch):
    """Mock this process's GPU: ``gpu((10, 0))`` makes it an SM100, ``gpu(None)`` removes it."""
    monkeypatch.setenv(arch_facts.ARCH_ENV, "sm_90")  # recorded, so teardown restores the caller's environment
    monkeypatch.delenv(arch_facts.ARCH_ENV)

    def mock(capability):
        monkeypatch.setattr(arch_facts, "device_capability", lambda: capability)

    return mock


TINY_SCENARIO = """name: tiny
family: markov_sharded
description: one row, one step, a temperature that needs the reciprocal table
seed: 7
worlds: [1]
size: gpu  # where a temperature that needs the reciprocal table is allowed
config: {vocab: 64, steps: 1, max_rows: 1, max_reqs: 1}
inputs: {temperatures: [0.6]}
calls:
  - {rows: 1}
expect: {outcome: golden}
"""


def run_one_rank(run_dir: Path) -> RankResult:
    """The worker's result of a one-launch markov_sharded case at world 1 on the golden implementation."""
    path = run_dir / "scenarios" / "markov_sharded" / "tiny.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(TINY_SCENARIO)
    spec = {"family": "markov_sharded", "name": "tiny", "path": str(path)}
    return ThreadWorld(1, timeout_s=120).run(lambda comm: case_run.run_case(
        spec, rank=0, group_rank=0, tp=1, group=None, impl="golden", run_dir=str(run_dir),
        make_handle=lambda fam: comm))[0]


# ------------------------------------------------------------------ selection


def test_mocked_capability_selects_that_architectures_facts(gpu, monkeypatch):
    gpu((9, 0))
    monkeypatch.setenv(arch_facts.ARCH_ENV, "sm_100")  # a GPU present wins over --arch
    choice = arch_facts.choose_arch()
    assert choice.arch == "sm_90" and "9.0" in choice.source and "ignored" in choice.source
    stored = json.loads(SM90.read_text())
    config = adapter("markov_sharded").golden_config({"vocab": 16})
    assert config["bias_fn"] == stored["facts"]["mma_model"]
    assert config["rcp_table"] == fp32.load_rcp_table("sm_90")
    assert arch_facts.facts_file(SHARDED_FIELDS) == "golden/data/arch/sm_90.json"


def test_without_a_gpu_the_cpu_default_or_arch_is_used_and_said(gpu, monkeypatch):
    gpu(None)
    choice = arch_facts.choose_arch()
    assert choice.arch == arch_facts.CPU_DEFAULT_ARCH and "no GPU" in choice.source
    assert "golden/data/arch/sm_90.json" in arch_facts.describe_choice()
    monkeypatch.setenv(arch_facts.ARCH_ENV, "sm_100a")
    assert arch_facts.choose_arch().arch == "sm_100"
    line = arch_facts.describe_choice()
    assert "sm_100" in line and "missing" in line and golden_arch.PROBE_COMMAND in line
    monkeypatch.setenv(arch_facts.ARCH_ENV, "../../etc")
    with pytest.raises(ValueError, match="sm_<major><minor>"):
        arch_facts.choose_arch()


def test_mocked_sm100_makes_the_cases_needing_facts_not_available(gpu, tmp_path):
    gpu((10, 0))
    for family in ("markov_sharded", "markov_fused"):
        with pytest.raises(NotAvailable) as caught:
            adapter(family).check_available("golden")
        message = str(caught.value)
        assert "sm_100" in message and golden_arch.PROBE_COMMAND in message, message
        with pytest.raises(NotAvailable, match="sm_100"):
            adapter(family).golden_config({})  # never a silent fallback to sm_90's facts
    adapter("allreduce_mhc").check_available("golden")  # needs no facts: unaffected
    result = run_one_rank(tmp_path)
    assert result.status == "not-available", result
    assert "sm_100" in result.error["message"] and golden_arch.PROBE_COMMAND in result.error["message"]


def test_a_case_records_the_facts_file_it_used(gpu, tmp_path):
    gpu((9, 0))
    result = run_one_rank(tmp_path)
    assert result.status == "ok" and result.comparison["mismatch_count"] == 0, result
    assert result.facts == "golden/data/arch/sm_90.json"
    case = CaseResult(family="markov_sharded", scenario="basic", world=1, launcher="cpu", status="pass",
                      facts=result.facts)
    assert '<property name="facts" value="golden/data/arch/sm_90.json"' in junit_xml([case], suite="s", header="h")
    assert adapter("allreduce_mhc").arch_facts == {} and arch_facts.facts_file({}) is None


# ------------------------------------------------------------------ the files


def copy_sm90(data_dir: Path) -> Path:
    """Today's sm_90 facts and table copied under ``data_dir``; the facts file's path."""
    (data_dir / "arch").mkdir(parents=True)
    shutil.copy(SM90_TABLE, data_dir / SM90_TABLE.name)
    return Path(shutil.copy(SM90, data_dir / "arch" / SM90.name))


def break_table(data_dir: Path, text: str | None) -> None:
    """Replace the copied reciprocal table's text (None: remove it)."""
    table = data_dir / SM90_TABLE.name
    table.unlink() if text is None else table.write_text(text)


@pytest.mark.parametrize("facts_change,table_text,field,culprit", [
    ("{not json", "", "not a readable JSON", "arch/sm_90.json"),
    ({"facts": {"mma_model": "volta_mma"}}, "", "mma_model", "arch/sm_90.json"),
    ({"format": "other/1"}, "", "format", "arch/sm_90.json"),
    ({"provenance": {"device": "x"}}, "", "driver", "arch/sm_90.json"),
    ({}, None, "does not exist", SM90_TABLE.name),
    ({}, '{"arch": "sm_100", "reciprocals": {}}', "sm_100", SM90_TABLE.name),
    ({}, '{"arch": "sm_90", "reciprocals": {"0x1": "zz"}}', "reciprocals", SM90_TABLE.name),
])
def test_a_corrupt_facts_file_is_an_error_naming_the_file(tmp_path, facts_change, table_text, field, culprit):
    path = copy_sm90(tmp_path)
    if isinstance(facts_change, str):
        path.write_text(facts_change)
    else:
        doc = json.loads(path.read_text())
        for key, value in facts_change.items():
            doc[key] = doc[key] | value if key == "facts" else value
        path.write_text(json.dumps(doc))
    if table_text != "":
        break_table(tmp_path, table_text)
    with pytest.raises(golden_arch.ArchFactsCorrupt) as caught:
        golden_arch.load_facts("sm_90", tmp_path)
    message = str(caught.value)
    assert field in message and str(tmp_path / culprit) in message, message


def test_a_corrupt_facts_file_makes_the_case_an_error_not_a_fallback(gpu, tmp_path, monkeypatch):
    gpu((9, 0))
    data = tmp_path / "data"
    path = copy_sm90(data)
    path.write_text("{")
    monkeypatch.setattr(golden_arch, "DATA_DIR", data)
    result = run_one_rank(tmp_path / "run")
    assert result.status == "error" and str(path) in result.error["message"], result


def test_the_stored_sm90_facts_are_canonical_and_hold_todays_data():
    text = SM90.read_text()
    doc = json.loads(text)
    assert golden_arch.render(doc) == text  # a regenerated file diffs against it line by line
    facts = golden_arch.load_facts("sm_90")
    assert facts.reciprocals == fp32.load_rcp_table("sm_90")
    full = json.loads((ROOT / "tests/data/arch/markov_sharded_mma_full_sm_90.json").read_text())
    recorded = {r["kind"]: (r["sums"], r["mismatches_by_model"]) for r in full["results"]}
    assert {e["kind"]: (e["sums"], e["mismatches_by_model"]) for e in doc["evidence"]["mma_probe"]} == recorded
    assert probe_mma.fitting_models(doc["evidence"]["mma_probe"]) == [facts.mma_model]


def test_differences_ignore_provenance_and_name_each_changed_fact():
    stored = json.loads(SM90.read_text())
    rerun = json.loads(SM90.read_text()) | {"provenance": {"date": "later"}}
    assert golden_arch.differences(stored, rerun) == []
    rerun["facts"]["mma_model"] = "mma_chain"
    rerun["evidence"]["mma_probe"][0]["mismatches_by_model"]["hopper_mma"] = 3
    assert golden_arch.differences(stored, rerun) == [
        "evidence.mma_probe[0].mismatches_by_model.hopper_mma: stored 0, probed 3",
        "facts.mma_model: stored 'hopper_mma', probed 'mma_chain'"]


# ------------------------------------------------------------------ the probe's decision and files


def probed_pair(provenance_date: str = "2030-01-01") -> tuple[dict, dict]:
    """Today's sm_90 facts and table as a re-run would write them (same facts, new provenance)."""
    facts, table = json.loads(SM90.read_text()), json.loads(SM90_TABLE.read_text())
    facts["provenance"] = facts["provenance"] | {"date": provenance_date, "command": golden_arch.PROBE_COMMAND}
    table["provenance"] = table["provenance"] | {"date": provenance_date}
    return facts, table


def test_a_rerun_with_equal_facts_is_reproduced_and_leaves_the_stored_files(tmp_path):
    data = tmp_path / "data"
    stored = copy_sm90(data)
    before = stored.read_bytes(), (data / SM90_TABLE.name).read_bytes()
    out = io.StringIO()
    code, diffs = probe.settle(*probed_pair(), run_dir=tmp_path / "run", data_dir=data, out=out)
    assert (code, diffs) == (0, []) and "reproduced" in out.getvalue()
    assert (stored.read_bytes(), (data / SM90_TABLE.name).read_bytes()) == before
    assert json.loads((tmp_path / "run" / "arch" / "sm_90.json").read_text())["provenance"]["date"] == "2030-01-01"


def test_a_rerun_with_other_facts_is_refused_with_the_differences_unless_replaced(tmp_path):
    data = tmp_path / "data"
    stored = copy_sm90(data)
    facts, table = probed_pair()
    key = next(iter(table["reciprocals"]))
    table["reciprocals"][key] = "0x3F800001"
    out = io.StringIO()
    code, diffs = probe.settle(facts, table, run_dir=tmp_path / "run", data_dir=data, out=out)
    assert code == 1 and diffs == [f"rcp_f32_sm_90.json: reciprocals.{key}: stored "
                                   f"{json.loads(SM90_TABLE.read_text())['reciprocals'][key]!r}, probed '0x3F800001'"]
    assert key in out.getvalue() and "--regenerate" in out.getvalue()
    assert stored.read_bytes() == SM90.read_bytes()
    code, _ = probe.settle(facts, table, run_dir=tmp_path / "run", data_dir=data, replace=True, out=io.StringIO())
    assert code == 0 and golden_arch.load_facts("sm_90", data).reciprocals[int(key, 16)] == 0x3F800001


def test_a_new_architecture_is_installed_and_then_loads(tmp_path):
    facts, table = probed_pair()
    doc = golden_arch.facts_document(arch="sm_100", mma_model="mma_chain",
                                     libdevice_checks=facts["facts"]["libdevice_checks"],
                                     mma_probe=facts["evidence"]["mma_probe"], provenance=facts["provenance"])
    code, _ = probe.settle(doc, table | {"arch": "sm_100"}, run_dir=tmp_path / "run", data_dir=tmp_path / "data",
                           out=io.StringIO())
    loaded = golden_arch.load_facts("sm_100", tmp_path / "data")
    assert code == 0 and loaded.mma_model == "mma_chain" and loaded.reciprocals == fp32.load_rcp_table("sm_90")


def model_chain(model):
    """A stand-in for the tensor cores that follows golden model ``model``."""
    return lambda head, embeds: torch.stack([model(embeds[s], head) for s in range(embeds.shape[0])])


TINY = {"tiny": {"normal": (2, 1), "spread": (1, 1), "cancel": (1, 1)}}


def test_the_mma_probe_decides_the_model_the_tensor_cores_follow():
    results = probe_mma.probe_models("tiny", chain=model_chain(hopper_mma_bias), sizes=TINY)
    assert probe_mma.fitting_models(results) == ["hopper_mma"]
    assert all(r["mismatches_by_model"]["mma_chain"] > 0 and r["examples_by_model"]["mma_chain"] for r in results)
    checks = {name: probe_fp32.CheckResult(name, inputs=1) for name in ("logf_ftz",)}
    doc, problems = probe.decide("sm_100", checks, results, {"device": "x"})
    assert problems == [] and doc["facts"]["mma_model"] == "hopper_mma"


def test_when_no_model_fits_the_probe_writes_no_facts_and_shows_mismatches():
    results = probe_mma.probe_models("tiny", chain=lambda h, e: model_chain(hopper_mma_bias)(h, e) * 1.5, sizes=TINY)
    assert probe_mma.fitting_models(results) == []
    doc, problems = probe.decide("sm_100", {}, results, {"device": "x"})
    assert doc is None and len(problems) == 1
    assert all(f"{name}:" in problems[0] for name in BIAS_FUNCTIONS) and '"gpu_bits"' in problems[0]


class GoldenAsHardware:
    """The golden's own functions standing in for ``kernels.markov_common.probe`` (on the CPU)."""

    logf_ftz = staticmethod(fp32.logf_ftz)
    tanhf = staticmethod(fp32.tanhf)

    @staticmethod
    def div_full(x, t):
        """``div.full.f32`` by powers of two, whose reciprocal is exact."""
        rcp = torch.tensor([fp32.reciprocal_bits(float(v), None) for v in t.unique()])
        return fp32.div_full_f32(x, t, fp32.f32_from_bits(rcp)[torch.searchsorted(t.unique(), t)])

    @staticmethod
    def murmur(seed, col, pos, vid):
        """The golden hash."""
        return draft_hash(seed, col.long(), pos, vid.long())

    @staticmethod
    def uniform(seed, col, pos, vid):
        """The golden uniform."""
        return draft_uniform(seed, col.long(), pos, vid.long())

    @staticmethod
    def gumbel(seed, col, pos, vid, logit, temp):
        """The golden noised score (power-of-two temperatures)."""
        rcp = torch.tensor([fp32.reciprocal_bits(float(t), None) for t in temp])
        return noised_scores(logit, temp, rcp, seed, col.long(), pos, vid.long())

    @staticmethod
    def output_logit(a, b, mult, inv_cap, cap, has_cap):
        """The golden output transform, cached bits as int32."""
        cached, logit = logit_transform(a.long() & 0xFFFF, b.long() & 0xFFFF, float(mult[0]), float(inv_cap[0]),
                                        float(cap[0]), has_cap)
        return fp32.bf16_bits(cached).to(torch.int32), logit


def test_the_libdevice_checks_give_the_stored_verdicts_and_catch_a_wrong_bit():
    checks = probe_fp32.run_checks(GoldenAsHardware, n=512, chunk=256, device="cpu")
    stored = json.loads(SM90.read_text())["facts"]["libdevice_checks"]
    assert {name: c.verdict() for name, c in checks.items()} == {name: c["verdict"] for name, c in stored.items()}
    assert checks["logf_ftz"].inputs == 512 and checks["div_full_pow2"].inputs == 256 * len(probe_fp32.POW2_TEMPERATURES)

    class OneBitOff(GoldenAsHardware):
        """logf with its last bit flipped on positive results."""

        @staticmethod
        def logf_ftz(x):
            """The golden logf, wrong in the last place where positive and finite."""
            y = fp32.logf_ftz(x)
            bits = fp32.f32_bits(y)
            return torch.where((y > 0) & y.isfinite(), fp32.f32_from_bits(bits ^ 1), y)

    broken = probe_fp32.run_checks(OneBitOff, n=256, chunk=256, device="cpu")
    assert not broken["logf_ftz"].ok and broken["logf_ftz"].verdict().startswith("FAILED")
    assert "gpu 0x" in broken["logf_ftz"].verdict() and broken["tanhf"].ok
    doc, problems = probe.decide("sm_90", broken, probe_mma.probe_models(
        "tiny", chain=model_chain(hopper_mma_bias), sizes=TINY), {})
    assert doc is None and problems[0].startswith("logf_ftz: FAILED")


def test_the_probe_driver_reproduces_the_stored_sm90_facts_from_equal_measurements(tmp_path, monkeypatch):
    """The whole driver with an H200 stood in for: measurements equal to today's must reproduce the stored file."""
    stored = json.loads(SM90.read_text())
    facts, table = probed_pair()
    stand_in = probe_fp32.run_checks(GoldenAsHardware, n=256, chunk=256, device="cpu")
    for name, check in stand_in.items():
        check.inputs = stored["facts"]["libdevice_checks"][name]["inputs"]  # the GPU run's 10^7 per check
    evidence = [dict(e, examples_by_model={m: [] for m in e["mismatches_by_model"]})
                for e in stored["evidence"]["mma_probe"]]
    monkeypatch.setattr(probe.rcp_table, "measuring_problem", lambda modules: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(probe, "run_provenance", lambda: facts["provenance"])
    measured = []
    monkeypatch.setattr(probe.rcp_table, "measured_document",
                        lambda temps, stored_table, **kw: measured.extend(temps) or table)
    monkeypatch.setattr(probe.probe_fp32, "run_checks", lambda progress: stand_in)
    monkeypatch.setattr(probe.probe_mma, "probe_models", lambda size, progress: evidence)
    before = SM90.read_bytes(), SM90_TABLE.read_bytes()
    out = io.StringIO()
    assert probe.run_probe(tmp_path, out=out) == 0, out.getvalue()
    assert "reproduced" in out.getvalue()
    assert (SM90.read_bytes(), SM90_TABLE.read_bytes()) == before
    # every stored temperature is measured again (powers of two too), so the table can be reproduced whole
    assert {int(fp32.f32_bits(torch.tensor(t))) for t in measured} == set(fp32.load_rcp_table("sm_90"))
    report = json.loads((tmp_path / probe.REPORT_NAME).read_text())
    assert report["differences"] == [] and report["fitting_models"] == ["hopper_mma"]
    assert golden_arch.differences(stored, json.loads((tmp_path / "arch" / "sm_90.json").read_text())) == []


# ------------------------------------------------------------------ the command line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_probe_without_a_gpu_exits_2_and_writes_nothing(tmp_path, capsys):
    before = SM90.read_bytes()
    assert cli.main(["golden", "--probe", "--run-dir", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert SM90.read_bytes() == before and not list(tmp_path.iterdir())
    assert cli.main(["golden", "--probe", "--arch", "sm_100"]) == 2
    assert "--probe measures the GPU present" in capsys.readouterr().err


def test_golden_arch_reaches_the_ranks_through_the_environment(gpu, monkeypatch):
    gpu(None)
    monkeypatch.delenv(arch_facts.ARCH_ENV, raising=False)  # cli.main sets it: restored (absent) after the test
    seen = []
    monkeypatch.setattr("harness.validate.run_validate", lambda req: seen.append(os.environ.get(arch_facts.ARCH_ENV))
                        or 0)
    # sm_90 has facts (an architecture without them stops at once with exit 2)
    assert cli.main(["golden", "--arch", "sm_90a"]) == 0
    assert seen == ["sm_90"] and arch_facts.choose_arch().arch == "sm_90"


def test_golden_for_an_architecture_without_facts_stops_at_once_with_exit_2(gpu, monkeypatch, capsys):
    gpu(None)
    ran = []
    monkeypatch.setattr("harness.validate.run_validate", lambda req: ran.append(req) or 0)
    assert cli.main(["golden", "--arch", "sm_100a"]) == 2
    assert ran == [] and "golden/data/arch/sm_100.json does not exist" in capsys.readouterr().err
