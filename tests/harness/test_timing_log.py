"""The timing log: appending validate runs to a timing log (runs/validate-timing.json by default), and refusing bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.reports.timing_log import main

ROOT = Path(__file__).resolve().parents[2]


def write_report(path, *, provenance=True, **summary):
    """A validate JSON report with the given summary (and a provenance block unless told not to)."""
    doc = {"header": "h", "results": [],
           "summary": {"cases": 250, "wall_s": 287.25, "counts": {"pass": 248, "fail": 1, "timeout": 0, "error": 1,
                                                                   "not-available": 0}} | summary}
    if provenance:
        doc["provenance"] = {"git": {"commit": "abc123", "dirty": False}, "started": "2026-12-01T10:00:00Z",
                             "gpus": {"count": 1, "names": ["NVIDIA H200"], "driver": "570"}}
    path.write_text(json.dumps(doc))
    return path


def test_two_appends_make_two_runs_with_the_reports_numbers_and_provenance(tmp_path, capsys):
    report, out = write_report(tmp_path / "report.json"), tmp_path / "results" / "validate-timing.json"
    assert main([str(report), "--out", str(out), "--command", "make validate", "--cache", "cold"]) == 0
    assert main([str(report), "--out", str(out), "--command", "make validate", "--cache", "warm",
                 "--device", "H200 (lent)"]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert runs[0] == {"command": "make validate", "device": "1x NVIDIA H200", "date": "2026-12-01T10:00:00Z",
                       "commit": "abc123", "cache": "cold", "wall_s": 287.2, "cases": 250, "failed": 2}
    assert (runs[1]["cache"], runs[1]["device"]) == ("warm", "H200 (lent)")
    assert "appended" in capsys.readouterr().out


def test_a_report_without_provenance_takes_this_machines_facts(tmp_path):
    report, out = write_report(tmp_path / "report.json", provenance=False), tmp_path / "timing.json"
    assert main([str(report), "--out", str(out), "--command", "make validate", "--cache", "warm"]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert run["commit"] == (head or None)
    assert run["date"].endswith("Z") and run["device"]


@pytest.mark.parametrize("content, needle", [
    (None, "does not exist"),
    ("{not json", "is not JSON"),
    (json.dumps({"results": []}), "has no summary"),
    (json.dumps({"summary": {"cases": 3, "counts": {}}}), "summary.wall_s must be a non-negative number"),
    (json.dumps({"summary": {"cases": 3, "wall_s": 1.0}}), "summary.counts"),
])
def test_bad_reports_are_refused_with_exit_2_and_leave_the_log_alone(tmp_path, capsys, content, needle):
    report, out = tmp_path / "report.json", tmp_path / "timing.json"
    if content is not None:
        report.write_text(content)
    out.write_text('{"runs": []}\n')
    assert main([str(report), "--out", str(out), "--command", "make validate", "--cache", "cold"]) == 2
    assert needle in capsys.readouterr().err
    assert out.read_text() == '{"runs": []}\n'


def test_an_out_file_that_is_not_a_timing_log_is_not_overwritten(tmp_path, capsys):
    report, out = write_report(tmp_path / "report.json"), tmp_path / "timing.json"
    out.write_text('{"something": "else"}')
    assert main([str(report), "--out", str(out), "--command", "make validate", "--cache", "cold"]) == 2
    assert "refusing to overwrite it" in capsys.readouterr().err
    assert out.read_text() == '{"something": "else"}'


def test_the_command_line_refuses_an_unknown_cache_state_and_an_empty_command(tmp_path):
    report, out = write_report(tmp_path / "report.json"), tmp_path / "timing.json"
    base = [sys.executable, "-m", "harness.reports.timing_log", str(report), "--out", str(out)]
    bad_cache = subprocess.run([*base, "--command", "make validate", "--cache", "lukewarm"], cwd=ROOT,
                               capture_output=True, text=True, timeout=60)
    assert bad_cache.returncode == 2 and "--cache" in bad_cache.stderr
    empty = subprocess.run([*base, "--command", " ", "--cache", "cold"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert empty.returncode == 2 and "--command must name the command" in empty.stderr
    assert not out.exists()
