"""What went wrong is on top of every report: the JSON's ``diagnoses`` first, the JUnit suite's first properties.

Written by the real ``Report`` (a node's) and merged by the real
``merge-reports``: the bad group's diagnosis leads the merged JSON and the
merged JUnit suite, timeouts before errors before wrong bits, each naming
its case, TP group, rank (as the group and as the world number it) and
launch; every JUnit case's classname starts with its TP group.
"""

import io
import json
import xml.etree.ElementTree as ET

from harness.launch.torchrun_options import Rendezvous
from harness.reports.merge import run_merge
from harness.reports.diagnoses import diagnoses
from harness.reports.report import Report
from harness.wire.case_result import CaseResult
from harness.launch.diagnosis import Diagnosis


def verdict(group: int, status: str = "pass", scenario: str = "basic", rank: int | None = None) -> CaseResult:
    """A case of TP group ``group`` (ranks 4g..4g+3); a failing one carries its diagnosis placed in its group."""
    diagnosis = None
    if status != "pass":
        diagnosis = Diagnosis(rank, 1, None, f"rank {rank} hung before launch 1").in_group(
            group, list(range(4 * group, 4 * group + 4))).to_json()
    return CaseResult("markov_sharded", scenario, 4, "cpu", status, group=group, diagnosis=diagnosis,
                      detail=diagnosis["text"] if diagnosis else "bits equal")


def node_report(directory, node: int, results) -> str:
    """Write node ``node``'s JSON and JUnit reports of a 3-node job; return the JSON's path."""
    rdzv = Rendezvous(nnodes=3, node_rank=node, nproc_per_node=4, id="job")
    path = directory / f"J.node{node}.json"
    with Report(header=f"# node {node}", json_path=path, junit_path=directory / f"J.node{node}.xml",
                stream=io.StringIO(), live=False, provenance={"node": rdzv.describe()}) as report:
        for r in results:
            report.add(r)
    return str(path)


def test_the_bad_groups_diagnosis_leads_the_merged_json_and_junit(tmp_path):
    inputs = [node_report(tmp_path, 0, [verdict(0), verdict(0, scenario="other")]),
              node_report(tmp_path, 1, [verdict(1), verdict(1, "timeout", "other", rank=1)]),
              node_report(tmp_path, 2, [verdict(2), verdict(2, scenario="other")])]
    node1 = (tmp_path / "J.node1.json").read_text()
    assert node1.lstrip().startswith('{\n "diagnoses"')  # a node's own report leads with it too
    code = run_merge(inputs, junit=str(tmp_path / "M.xml"), json_path=str(tmp_path / "M.json"), stream=io.StringIO())
    assert code == 1
    text = (tmp_path / "M.json").read_text()
    assert text.lstrip().startswith('{\n "diagnoses"')
    (top,) = json.loads(text)["diagnoses"]
    assert (top["group"], top["rank"], top["global_rank"], top["launch"], top["status"], top["nodes"]) == (
        1, 1, 5, 1, "timeout", [1])
    assert top["text"] == "TP group 1 (ranks 4-7), global rank 5: rank 1 hung before launch 1"
    suite = ET.parse(tmp_path / "M.xml").getroot().find("testsuite")
    props = [(p.get("name"), p.get("value")) for p in suite.find("properties")]
    assert props[0] == ("result", "FAILED")
    assert props[1] == ("diagnosis.0", f"TIMEOUT {top['case_id']}: {top['text']}")
    assert props[2] == ("exit_code", "1") and props[3][0] == "header"
    classes = sorted({c.get("classname") for c in suite.findall("testcase")})
    assert classes == [f"group{g}.markov_sharded.{s}" for g in range(3) for s in ("basic", "other")]


def test_diagnoses_list_timeouts_before_errors_before_wrong_bits_and_skip_what_passed():
    results = [verdict(0, "fail", rank=0), verdict(1), verdict(2, "error", rank=2), verdict(3, "timeout", rank=3),
               CaseResult("markov_sharded", "no_diagnosis", 4, "cpu", "error", group=4)]
    assert [(d["status"], d["group"]) for d in diagnoses(results)] == [("timeout", 3), ("error", 2), ("fail", 0)]
