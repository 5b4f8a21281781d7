"""Every JUnit report the harness writes validates against ``junit-10.xsd`` (tests/data, from Jenkins' xUnit plugin).

The reports checked: a run's report with every status, TP groups, a facts
file and stored-bits checks; the report ``merge-reports`` writes from node
reports; and the report of a real cpu-launcher run with a planted crash.
Each case has a unique name (its case id: scenario, world, launcher), the
suite has a timestamp and a hostname, ``tests`` counts cases (the stored-bits
checks are a suite of their own), and a failure's type says what happened.
"""

import io
import os
import subprocess
import sys
from pathlib import Path

from lxml import etree

from harness.launch.diagnosis import Diagnosis
from harness.launch.torchrun_options import Rendezvous
from harness.reports.merge import run_merge
from harness.reports.report import Report
from harness.wire.case_result import STORED_BITS_LAUNCHER, CaseResult
from hang_guard import HANG_GUARD_S


ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "data" / "junit-10.xsd"
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def assert_valid(path) -> "etree._Element":
    """Parse ``path``, fail with the schema's messages unless it validates against junit-10.xsd; return the root."""
    schema = etree.XMLSchema(etree.parse(str(SCHEMA)))
    doc = etree.parse(str(path))
    assert schema.validate(doc), "\n".join(str(e) for e in schema.error_log)
    return doc.getroot()


def every_kind_of_result() -> list[CaseResult]:
    """One result of each status and shape: groups, a facts file, a crash, a hang, an exception, stored bits."""
    crash = Diagnosis(1, 2, None, "rank 1 crashed before launch 2", cause="crash").to_json()
    hang = Diagnosis(0, 1, None, "rank 0 hung before launch 1", logs={0: "/nonexistent/stderr.log"}).to_json()
    return [
        CaseResult("markov_sharded", "basic", 2, "cpu", "pass", detail="bits equal", facts="golden/data/arch/sm_90.json"),
        CaseResult("markov_sharded", "basic", 4, "cpu", "pass", group=0, facts="golden/data/arch/sm_90.json"),
        CaseResult("markov_sharded", "basic", 4, "cpu", "fail", group=1, mismatch_count=3,
                   first_mismatch="rank 1, cache[row 0]: got 0x1 expected 0x2"),
        CaseResult("markov_sharded", "hang", 2, "cpu", "timeout", detail="timed out: rank 0 hung", diagnosis=hang),
        CaseResult("markov_sharded", "crash", 2, "cpu", "error", diagnosis=crash,
                   detail="rank 1: RuntimeError: rank 1 ended without a result (exit code 43)"),
        CaseResult("markov_sharded", "raise", 2, "cpu", "error", detail="rank 0: ValueError: x"),
        CaseResult("allreduce_mhc", "basic", 2, "cpu", "not-available", detail="no GPU"),
        CaseResult("markov_sharded", "basic:stored-bits", 2, STORED_BITS_LAUNCHER, "pass"),
        CaseResult("markov_sharded", "other:stored-bits", 2, STORED_BITS_LAUNCHER, "fail", detail="bits differ"),
    ]


def write_report(path, results, **kw) -> None:
    """Write ``results`` through the real ``Report`` as JUnit ``path`` (and JSON beside it)."""
    with Report(header="# t", junit_path=path, json_path=Path(path).with_suffix(".json"), stream=io.StringIO(),
                live=False, **kw) as report:
        for r in results:
            report.add(r)


def test_a_report_of_every_status_validates_with_unique_names_and_typed_failures(tmp_path):
    write_report(tmp_path / "r.xml", every_kind_of_result())
    root = assert_valid(tmp_path / "r.xml")
    cases_suite, checks_suite = root.findall("testsuite")
    cases = cases_suite.findall("testcase")
    assert cases_suite.get("tests") == str(len(cases)) == "7"  # the stored-bits checks are not cases
    assert checks_suite.get("name") == "rankcheck:stored-bits" and checks_suite.get("tests") == "2"
    assert len({(c.get("classname"), c.get("name")) for c in cases}) == len({c.get("name") for c in cases}) == 7
    assert cases[0].get("name") == "markov_sharded/basic[world=2,launcher=cpu]"
    assert cases_suite.get("timestamp") and cases_suite.get("hostname")
    types = {c.get("name").split("[")[0]: (c[0].tag, c[0].get("type")) for c in cases if len(c) and c[0].tag != "system-out"}
    assert types["markov_sharded/hang"] == ("error", "timeout")
    assert types["markov_sharded/crash"] == ("error", "crash")
    assert types["markov_sharded/raise"] == ("error", "error")
    failed = next(c for c in cases if c.get("classname") == "group1.markov_sharded.basic")
    assert failed.find("failure").get("type") == "mismatch"
    assert "facts: golden/data/arch/sm_90.json" in cases[0].find("system-out").text


def test_the_merged_report_of_node_reports_validates(tmp_path):
    inputs = []
    for node in (0, 1):
        rdzv = Rendezvous(nnodes=2, node_rank=node, nproc_per_node=2, id="job")
        path = tmp_path / f"J.node{node}.xml"
        write_report(path, [r for r in every_kind_of_result() if r.group in (None, node)],
                     provenance={"node": rdzv.describe()})
        assert_valid(path)
        inputs.append(str(path.with_suffix(".json")))
    run_merge(inputs, junit=str(tmp_path / "M.xml"), json_path=str(tmp_path / "M.json"), stream=io.StringIO())
    root = assert_valid(tmp_path / "M.xml")
    names = [c.get("name") for c in root.find("testsuite").findall("testcase")]
    assert len(names) == len(set(names))


def test_a_real_runs_report_with_a_planted_crash_validates(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "tiny", "--world", "2",
         "--inject", "markov_sharded/tiny:crash:rank=1,launch=1", "--scenario-root", str(SCENARIOS),
         "--run-dir", str(tmp_path), "--no-store"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    root = assert_valid(tmp_path / "report.xml")
    (case,) = root.find("testsuite").findall("testcase")
    assert case.find("error").get("type") == "crash"
