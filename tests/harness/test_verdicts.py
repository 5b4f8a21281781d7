"""Honest verdicts: exit codes, names, --inject checks, argument messages, provenance, the live view.

The runs here go through ``cli.main`` and ``run_validate`` with a stand-in
``JobRunner`` that reports chosen statuses without starting processes (the
real processes are exercised by test_cpu_launcher.py and by the commands
of README and docs/ in test_readme_commands.py); everything else is the real code.
"""

import io
import json
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from harness import cli, replay
from harness.reports import provenance
from harness.families.catalog import discover, select
from harness.reports.live import LiveView, eta_s, rows_to_show, world_counts
from harness.reports.junit import failure_text
from harness.reports.report import Report
from harness.wire.case_result import CaseResult
from harness.validate import ValidateRequest, run_validate
from fake_job_runner import fake_runner

SCENARIOS = str(Path(__file__).resolve().parent / "scenarios")


def result(status, scenario="s", world=2, launcher="cpu", **kw):
    """A CaseResult for the tests."""
    return CaseResult("markov_sharded", scenario, world, launcher, status, **kw)


def validate(monkeypatch, tmp_path, *args, statuses=(), interrupt_after=None):
    """``cli.main(["validate", ...])`` over the test scenarios with a fake runner; (exit code, JSON report)."""
    runner, _ = fake_runner(list(statuses), interrupt_after=interrupt_after)
    monkeypatch.setattr("harness.validate.JobRunner", runner)
    code = cli.main(["validate", "--scenario-root", SCENARIOS, "--run-dir", str(tmp_path), "--no-store", *args])
    return code, json.loads((tmp_path / "report.json").read_text())


# -- exit codes


def test_no_case_at_the_requested_world_exits_2_saying_which_worlds_exist(monkeypatch, tmp_path, capsys):
    code, doc = validate(monkeypatch, tmp_path, "--launcher", "cpu", "--world", "3")
    out = capsys.readouterr().out
    assert code == 2
    assert "# Result : NOTHING RUN" in out and "world 3" in out and "[1, 2, 4, 8]" in out
    assert "Result : OK" not in out
    assert doc["summary"]["exit_code"] == 2 and doc["summary"]["cases"] == 0


def test_an_unknown_family_exits_2_with_the_families_there_are(capsys):
    assert cli.main(["validate", "--scenario-root", SCENARIOS, "--family", "markov"]) == 2
    err = capsys.readouterr().err
    assert "did you mean markov_sharded" in err and "the families are markov_sharded" in err


def test_every_case_not_available_exits_3_unless_allowed(monkeypatch, tmp_path, capsys):
    args = ("--launcher", "torchrun", "--scenario", "tiny", "--world", "2")
    code, doc = validate(monkeypatch, tmp_path / "strict", *args, statuses=["not-available"])
    assert code == 3 and "# Result : NOT AVAILABLE" in capsys.readouterr().out
    code, doc = validate(monkeypatch, tmp_path / "allowed", *args, "--allow-unavailable", statuses=["not-available"])
    assert code == 0 and doc["summary"]["result"].startswith("OK")


def test_some_unavailable_among_passes_is_ok_and_a_failure_is_1():
    with Report(header="h", stream=io.StringIO(), live=False) as mixed:
        mixed.add(result("pass"))
        mixed.add(result("not-available", "t"))
    assert mixed.exit_code() == 0
    with Report(header="h", stream=io.StringIO(), live=False) as failed:
        failed.add(result("pass"))
        failed.add(result("timeout", "t"))
    assert failed.exit_code() == 1


def test_a_refused_scenario_file_makes_a_passing_run_exit_2_and_every_file_says_so(tmp_path):
    stream = io.StringIO()
    refused = ["root/bad.yaml: not valid YAML: duplicate key 'expect'"]
    with Report(header="h", stream=stream, live=False, refused_inputs=refused, json_path=tmp_path / "r.json",
                junit_path=tmp_path / "r.xml") as report:
        report.add(result("pass"))
    assert report.exit_code() == 2
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert summary["exit_code"] == 2 and summary["refused_inputs"] == refused
    assert summary["result"].startswith("INPUT REFUSED (1 scenario file(s) refused, not run: root/bad.yaml")
    props = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "r.xml").iter("property")}
    assert props["exit_code"] == "2" and props["result"] == summary["result"]
    footer = stream.getvalue().splitlines()[-1]
    assert footer.startswith("# Result : INPUT REFUSED (") and "(exit 2, " in footer
    with Report(header="h", stream=io.StringIO(), live=False, refused_inputs=refused) as failed:
        failed.add(result("fail"))
    assert failed.verdict() == ("FAILED", 1)  # a failure found among the files that loaded is still the verdict


def test_an_interrupted_run_exits_130_and_says_how_far_it_got(monkeypatch, tmp_path, capsys):
    code, doc = validate(monkeypatch, tmp_path, "--launcher", "cpu", "--world", "1", "2", interrupt_after=1)
    out = capsys.readouterr().out
    assert code == 130
    assert "# Result : INTERRUPTED (1 of 4 run)" in out and "Result : OK" not in out
    assert doc["summary"]["interrupted"] is True and len(doc["results"]) == 1


def test_an_interrupt_before_the_report_is_drawn_still_is_an_interruption(monkeypatch, tmp_path):
    def interrupted_enter(self):
        raise KeyboardInterrupt

    monkeypatch.setattr("harness.validate.Report.__enter__", interrupted_enter)
    monkeypatch.setattr("harness.validate.JobRunner", fake_runner([])[0])
    req = ValidateRequest(launcher="cpu", worlds=[1], scenario_root=SCENARIOS, run_dir=str(tmp_path), store=None)
    assert run_validate(req, stream=io.StringIO()) == 130  # returned by the report, not raised past replay's view


def test_a_run_ended_by_an_exception_is_never_ok():
    stream = io.StringIO()
    with pytest.raises(RuntimeError):
        with Report(header="h", stream=stream, live=False) as report:
            report.add(result("pass"))
            raise RuntimeError("job runner broke")
    assert report.exit_code() == 1
    assert "# Result : ABORTED (RuntimeError: job runner broke)" in stream.getvalue()


def test_stored_bits_checks_are_not_cases_but_their_failure_fails_the_run():
    stream = io.StringIO()
    with Report(header="h", stream=stream, live=False, planned={2: 2}) as report:
        report.add(result("pass", "a"))
        report.add(result("pass", "a:stored-bits", launcher="store"))
        report.add(result("pass", "b"))
    summary = report.summary()
    assert (summary["cases"], summary["planned"], summary["stored_bits"]["pass"]) == (2, 2, 1)
    out = stream.getvalue()
    assert "# Cases : 2 of 2" in out and "# Stored bits : 1 checked" in out and "[2/2]" in out
    with Report(header="h", stream=io.StringIO(), live=False, planned={2: 1}) as bad:
        bad.add(result("pass", "a"))
        bad.add(result("fail", "a:stored-bits", launcher="store"))
    assert bad.exit_code() == 1 and bad.summary()["cases"] == 1


def test_planned_total_counts_each_tp_group_once_per_case(monkeypatch, tmp_path):
    code, doc = validate(monkeypatch, tmp_path, "--launcher", "cpu", "--scenario", "tiny", "--world", "4",
                         "--tp", "2")
    # the fake runner reports one result per case; the plan counts one per TP group (4 / 2 = 2)
    assert doc["summary"]["planned"] == 2


def test_reports_can_be_fed_from_several_threads(monkeypatch, tmp_path):
    inside, most = [0], [0]
    real_write = __import__("harness.wire.atomic_file", fromlist=["atomic_write"]).atomic_write

    def watched_write(path, text):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.001)
        real_write(path, text)
        inside[0] -= 1

    monkeypatch.setattr("harness.reports.report.atomic_write", watched_write)
    with Report(header="h", json_path=tmp_path / "r.json", stream=io.StringIO(), live=False) as report:
        threads = [threading.Thread(target=lambda t=t: [report.add(result("pass", f"t{t}c{i}")) for i in range(10)])
                   for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert most[0] == 1  # one writer at a time
    assert len(json.loads((tmp_path / "r.json").read_text())["results"]) == 40


# -- names


def test_a_bare_name_in_several_families_asks_for_the_family():
    with pytest.raises(ValueError, match="name one of .*markov_fused/skip_launch.*markov_sharded/skip_launch"):
        select(discover(), names=["skip_launch"])
    [case] = select(discover(), names=["skip_launch"], family="markov_sharded")
    assert case.key == "markov_sharded/skip_launch"


def test_an_unknown_name_gets_a_short_did_you_mean():
    with pytest.raises(ValueError) as exc:
        select(discover(), names=["markov_sharded/skip_lanch"])
    message = str(exc.value)
    assert "did you mean markov_sharded/skip_launch" in message and len(message) < 400


def test_replay_of_an_ambiguous_name_is_an_argument_error(capsys):
    assert cli.main(["replay", "skip_launch"]) == 2
    assert "scenario: 'skip_launch' is a scenario of 3 families" in capsys.readouterr().err


# -- --inject


def test_inject_ranks_are_checked_at_the_world_being_run(monkeypatch, tmp_path):
    requests = []
    monkeypatch.setattr(replay, "run_validate", lambda req: requests.append(req) or 0)
    monkeypatch.setattr(replay.records, "read_group_progress", lambda *a: {})
    monkeypatch.setattr(replay.records, "read_results", lambda *a: {})
    assert replay.run_replay("markov_sharded/basic", world=2, inject=["hang:rank=1,launch=1"], launcher="cpu",
                             run_dir=str(tmp_path)) == 0
    [req] = requests
    copy = yaml.safe_load((Path(req.scenario_root) / "markov_sharded" / "basic.yaml").read_text())
    assert copy["worlds"] == [2] and copy["inject"][-1] == {"kind": "hang", "rank": 1, "launch": 1}


def test_a_bad_inject_names_the_argument_and_the_world(tmp_path, capsys):
    code = cli.main(["replay", "markov_sharded/basic", "--world", "2", "--inject", "hang:rank=5,launch=1",
                     "--run-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "--inject 'hang:rank=5,launch=1': rank: expected int in 0..1, got 5 at --world 2" in err
    assert str(tmp_path) not in err and not (tmp_path / "scenario").exists()


# -- argument messages


@pytest.mark.parametrize("args, words", [
    (["validate", "--world", "x"], "argument --world: expected a whole number >= 1, got 'x'"),
    (["validate", "--deadline", "soon"], "argument --deadline: expected a number of seconds > 0, got 'soon'"),
    (["validate", "--node-rank", "-1"], "argument --node-rank: expected a whole number >= 0, got '-1'"),
    (["golden", "--measure-rcp", "warm"], "argument --measure-rcp: expected a finite number, got 'warm'"),
])
def test_argument_errors_say_what_was_expected(args, words, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2 and words in capsys.readouterr().err


# -- provenance and JUnit


def test_reports_carry_provenance_and_a_schema(tmp_path):
    junit, js = tmp_path / "r.xml", tmp_path / "r.json"
    with Report(header="h", junit_path=junit, json_path=js, stream=io.StringIO(), live=False) as report:
        report.add(result("pass"))
    doc = json.loads(js.read_text())
    assert doc["schema"] == "rankcheck-validate/2"
    facts = doc["provenance"]
    assert facts["host"] and facts["python"] and facts["started"].endswith("Z")
    assert set(facts["multicast"]) == {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}
    assert isinstance(facts["gpus"]["count"], int) and "commit" in facts["git"] and "torch" in facts
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["schema"] == "rankcheck-validate/2" and props["provenance.host"] == facts["host"]
    assert "provenance.multicast.NCCL_NVLS_ENABLE" in props


def test_provenance_tolerates_no_git_no_gpu_tools_and_gives_the_jobs_multicast_values(monkeypatch):
    monkeypatch.setattr(provenance, "command_output", lambda *a, **k: None)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    facts = provenance.collect(0.0, job_env={"NCCL_NVLS_ENABLE": "0"})
    assert facts["git"] == {"commit": None, "dirty": None} and facts["started"] == "1970-01-01T00:00:00Z"
    assert facts["multicast"]["NCCL_NVLS_ENABLE"] == "0"  # what the ranks ran with, not the harness's own
    assert provenance.command_output(["rankcheck-no-such-command"]) is None


def test_a_failing_case_carries_the_first_mismatch_and_its_ranks_log_tail(tmp_path):
    logs = {}
    for rank in (0, 1):
        logs[rank] = tmp_path / f"rank{rank}.log"
        logs[rank].write_text("".join(f"rank {rank} line {i}\n" for i in range(100)))
    r = result("timeout", detail="rank 1 hung before launch 2", first_mismatch="rank 1 cache[0]: got 0x1",
               diagnosis={"rank": 1, "launch": 2, "logs": {str(k): str(v) for k, v in logs.items()}})
    body = failure_text(r)
    assert "first mismatch: rank 1 cache[0]: got 0x1" in body
    assert "rank 1 line 99" in body and "rank 1 line 60" in body and "rank 1 line 59\n" not in body
    assert "rank 0 line" not in body
    missing = result("error", diagnosis={"rank": None, "logs": {"0": str(tmp_path / "gone.log")}})
    assert "(no such file)" in failure_text(missing)


# -- the live view


def test_the_live_view_fits_a_short_terminal_and_keeps_failures_counts_and_bar():
    console = Console(file=io.StringIO(), width=140, height=16, force_terminal=True, record=True)
    view = LiveView(console, total=60, planned={1: 20, 2: 40})
    results = [result("pass", f"p{i}", world=1 + i % 2) for i in range(30)]
    results.insert(3, result("fail", "broken", first_mismatch="cache[row 0]: got 0x1 expected 0x2"))
    results.append(result("pass", "x:stored-bits", launcher="store"))
    view.show(results)
    console.print(view.renderable())
    drawn = console.export_text()
    assert len(drawn.splitlines()) <= 16
    assert "broken" in drawn and "x:stored-bits" in drawn  # the failure and the latest row
    assert "cache[row 0]: got 0x1" in drawn  # details are text, not markup
    assert "31/60" in drawn and "world 1: 15/20 · world 2: 16/40" in drawn and "ETA" in drawn
    assert "row(s) not shown" in drawn


def test_rows_to_show_keeps_failures_then_the_latest_in_order():
    rows = [result("pass", f"p{i}") for i in range(10)]
    rows[2] = result("fail", "f")
    shown, hidden = rows_to_show(rows, 4)
    assert [r.scenario for r in shown] == ["f", "p7", "p8", "p9"] and hidden == 6
    assert rows_to_show(rows[:3], 10) == (rows[:3], 0)


def test_eta_is_the_mean_time_per_case_times_the_cases_left():
    assert eta_s(10.0, 2, 6) == 20.0
    assert eta_s(10.0, 0, 6) is None and eta_s(10.0, 2, None) is None
    assert world_counts([result("pass", world=2)], {1: 3, 2: 1}) == "world 1: 0/3 · world 2: 1/1"
