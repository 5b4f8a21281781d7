"""The report on disk says how the run ended: running until its last write, then completed, interrupted or hangup.

Runs go through ``cli.main`` with a stand-in ``JobRunner`` (no processes:
the real ones are in test_rank_deaths.py); the interrupt during the last
write is a KeyboardInterrupt raised by the report's own file write when it
writes the finished report the first time.
"""

import json
from pathlib import Path

from harness import cli
from harness.reports import report as report_module
from harness.reports.report import RUNNING, Report
from harness.wire.case_result import CaseResult

from fake_job_runner import fake_runner

SCENARIOS = str(Path(__file__).resolve().parent / "scenarios")
ARGS = ["validate", "--scenario-root", SCENARIOS, "--scenario", "markov_sharded/tiny", "--world", "1",
        "--launcher", "cpu", "--no-store"]


PassingRunner = fake_runner([])[0]  # a JobRunner stand-in that passes every case without starting a process


def test_the_files_say_running_until_the_last_write(tmp_path):
    path = tmp_path / "report.json"
    with Report(header="# h", json_path=path, planned={1: 1}, live=False, stream=open("/dev/null", "w")) as rep:
        first = json.loads(path.read_text())["summary"]
        rep.add(CaseResult("markov_sharded", "tiny", 1, "cpu", "pass"))
        during = json.loads(path.read_text())["summary"]
    last = json.loads(path.read_text())["summary"]
    assert first["ended"] == RUNNING and first["result"].startswith("RUNNING") and first["exit_code"] == 1
    assert "NOTHING RUN" not in first["result"]
    assert during["ended"] == RUNNING and during["exit_code"] == 1
    assert (last["ended"], last["result"], last["exit_code"]) == ("completed", "OK", 0)


def test_an_interrupt_during_the_last_write_still_ends_interrupted(monkeypatch, tmp_path):
    monkeypatch.setattr("harness.validate.JobRunner", PassingRunner)
    real_write = report_module.atomic_write
    cut = []

    def write_cut_once(path, text):
        """The first write of a finished JSON report is cut by an interrupt, as a Ctrl-C there would."""
        if str(path).endswith(".json") and '"ended": "completed"' in text and not cut:
            cut.append(path)
            raise KeyboardInterrupt
        real_write(path, text)

    monkeypatch.setattr(report_module, "atomic_write", write_cut_once)
    code = cli.main(ARGS + ["--run-dir", str(tmp_path)])
    summary = json.loads((tmp_path / "report.json").read_text())["summary"]
    assert cut and code == 130
    assert summary["interrupted"] is True and summary["ended"] == "interrupted(SIGINT)" and summary["exit_code"] == 130


def test_an_unwritable_report_is_exit_2_naming_the_file(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("harness.validate.JobRunner", PassingRunner)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = cli.main(ARGS + ["--run-dir", str(tmp_path / "run"), "--json", str(blocker / "report.json")])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot write the report {blocker / 'report.json'}" in err and "Traceback" not in err
