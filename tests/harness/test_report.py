"""Reports: JUnit XML and JSON valid after every result (incremental), the nccl-tests footer, the exit code."""

import io
import json
import xml.etree.ElementTree as ET

import pytest

from harness.reports.report import Report
from harness.wire.atomic_file import atomic_write
from harness.wire.case_result import CaseResult


def result(status, scenario="s", mismatches=0, **kw):
    """A CaseResult for the tests."""
    return CaseResult("markov_sharded", scenario, 2, "cpu", status, mismatch_count=mismatches, **kw)


def test_files_are_valid_after_each_result(tmp_path):
    junit, js = tmp_path / "r.xml", tmp_path / "r.json"
    stream = io.StringIO()
    plan = [result("pass", "a"), result("fail", "b", 5, first_mismatch="rank 1, cache[row 0]: got 0x1 expected 0x2"),
            result("timeout", "c", detail="rank 1 did not begin launch 2"), result("not-available", "d", detail="no GPU"),
            result("error", "e", detail="rank 0: ValueError: x")]
    with Report(header="# test", junit_path=junit, json_path=js, stream=stream, live=False) as report:
        assert ET.parse(junit).getroot().find("testsuite").get("tests") == "0"
        for i, r in enumerate(plan, 1):
            report.add(r)
            suite = ET.parse(junit).getroot().find("testsuite")
            assert len(suite.findall("testcase")) == i
            assert len(json.loads(js.read_text())["results"]) == i
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "2", "1")
    cases = {c.get("classname"): c for c in suite.findall("testcase")}
    assert "got 0x1 expected 0x2" in cases["markov_sharded.b"].find("failure").get("message")
    assert cases["markov_sharded.c"].find("error").get("type") == "timeout"
    assert cases["markov_sharded.d"].find("skipped") is not None
    doc = json.loads(js.read_text())
    assert doc["summary"]["mismatching_elements"] == 5 and doc["summary"]["ok"] is False
    assert doc["results"][1]["case_id"] == "markov_sharded/b[world=2,launcher=cpu]"
    out = stream.getvalue()
    assert "# Out of bounds values : 5 FAILED" in out and "# Result : FAILED" in out
    assert report.exit_code() == 1


def test_all_passing_or_unavailable_exits_zero(tmp_path):
    with Report(header="h", json_path=tmp_path / "r.json", stream=io.StringIO(), live=False) as report:
        report.add(result("pass"))
        report.add(result("not-available"))
    assert report.exit_code() == 0
    assert "# Out of bounds values : 0 OK" in report.footer()


def test_live_table_renders(tmp_path):
    stream = io.StringIO()
    with Report(header="h", stream=stream, live=True, total=2) as report:
        report.add(result("pass", "first"))
        report.add(result("fail", "second", 1, first_mismatch="m"))
    rendered = stream.getvalue()
    assert "\x1b[" in rendered and "pass" in rendered and "fail" in rendered and "2/2" in rendered


def test_unknown_status_is_rejected():
    with pytest.raises(ValueError, match="status"):
        result("passed")


def test_atomic_write_leaves_no_temporary(tmp_path):
    atomic_write(tmp_path / "x.json", "{}")
    atomic_write(tmp_path / "x.json", '{"a": 1}')
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}
