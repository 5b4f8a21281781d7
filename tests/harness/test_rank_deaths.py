"""Death named, orphans ended, the end told: real cpu-launcher runs with one rank killed, stopped, or the harness gone.

Each test starts ``python -m harness validate --launcher cpu`` on the tiny
scenario at world 2 with rank 1 held in an injected delay at launch 1, so
the case is mid-flight for as long as the test needs; it waits (polling the
run directory, with a generous deadline) for rank 1's ``delay`` record,
reads rank 0's pid from its own progress records and signals it, or the
harness. Every process the run starts carries the test's token in
``RANKCHECK_RUN_TOKEN`` (the harness adds its own trees' tokens after it),
so "no process left" is a ``/proc`` scan for that token, polled until a
deadline that only fails the test when it is exceeded.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.launch.diagnosis import diagnose
from harness.launch.rank_deaths import death_words, first_failure
from harness.launch.supervision import TOKEN_VAR, processes_with_token

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = str(ROOT / "tests" / "harness" / "scenarios")
# Generous bounds: they fail the test only when exceeded, they never order anything.
DEADLINE_S = 240.0
GONE_WITHIN_S = 60.0
# Exec the given command with SIGHUP at its default disposition (an ignored signal stays ignored across exec).
HANGUP_AT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
                     "os.execv(sys.argv[1], sys.argv[1:])")


def poll(condition, deadline_s: float = DEADLINE_S, what: str = "the condition"):
    """``condition()``'s first true value, polled until ``deadline_s``; fails the test past it."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"{what} not seen within {deadline_s:g} s")


class Run:
    """A ``harness validate`` subprocess of the tiny scenario with rank 1 delayed at launch 1."""

    def __init__(self, run_dir: Path, *, delay_s: float = 600, deadline_s: float = 300) -> None:
        self.run_dir = run_dir
        self.token = uuid.uuid4().hex
        env = dict(os.environ, PYTHONPATH=str(ROOT), **{TOKEN_VAR: self.token})
        argv = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario-root", SCENARIOS,
                "--scenario", "markov_sharded/tiny", "--world", "2", "--no-store", "--no-standby",
                "--run-dir", str(run_dir), "--deadline", f"{deadline_s:g}",
                "--inject", f"markov_sharded/tiny:delay:rank=1,launch=1,seconds={delay_s:g}"]
        # The harness starts as from a terminal, SIGHUP at its default: under nohup (a test run started with
        # it) the inherited SIG_IGN would keep the harness from taking SIGHUP, as nohup means it to.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HANGUP_AT_DEFAULT, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def progress(self, rank: int) -> list[dict]:
        """Rank ``rank``'s progress records so far."""
        out = []
        for path in self.run_dir.glob(f"cases/*/w2/rank{rank}.progress.jsonl"):
            for line in path.read_text().splitlines():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # the line being written
        return out

    def rank0_pid_once_rank1_is_delayed(self) -> int:
        """Rank 0's pid, once rank 1 has announced its delay at launch 1 (the case is mid-flight)."""
        poll(lambda: any(r.get("event") == "delay" for r in self.progress(1)), what="rank 1's delay record")
        return poll(lambda: next((r["pid"] for r in reversed(self.progress(0)) if "pid" in r), None),
                    what="rank 0's pid")

    def finish(self) -> tuple[int, str, dict]:
        """(exit code, output, JSON report) once the harness has ended."""
        out, _ = self.proc.communicate(timeout=DEADLINE_S)
        return self.proc.returncode, out, json.loads((self.run_dir / "report.json").read_text())

    def left(self) -> dict:
        """The run's processes still alive (pid -> pgid), the harness itself left out."""
        return {pid: g for pid, g in processes_with_token(self.token).items() if pid != self.proc.pid}

    def end(self) -> None:
        """Kill whatever the run left (the test failed part way)."""
        for pid in [self.proc.pid, *processes_with_token(self.token)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=60)


@pytest.fixture
def run(tmp_path):
    """Start a Run in ``tmp_path/run``; end anything it left at teardown."""
    started: list[Run] = []

    def start(**kw) -> Run:
        started.append(Run(tmp_path / "run", **kw))
        return started[-1]

    yield start
    for r in started:
        r.end()


@pytest.mark.parametrize("sig, words", [(signal.SIGKILL, "was killed by SIGKILL (signal 9)"),
                                        (signal.SIGTERM, "was killed by SIGTERM (signal 15)")])
def test_a_killed_rank_is_named_with_its_signal_and_last_record(run, sig, words):
    r = run()
    os.kill(r.rank0_pid_once_rank1_is_delayed(), sig)
    code, out, report = r.finish()
    assert code == 1, out
    [diag] = report["diagnoses"]
    assert diag["rank"] == 0 and diag["status"] == "error", diag
    assert diag["text"].startswith(f"rank 0 {words} at launch 1; its last progress record: "), diag
    assert report["summary"]["ended"] == "completed" and not r.left()


def test_a_stopped_rank_is_named_as_stopped(run):
    r = run(deadline_s=10)
    pid = r.rank0_pid_once_rank1_is_delayed()
    os.kill(pid, signal.SIGSTOP)
    code, out, report = r.finish()
    assert code == 1, out
    [diag] = report["diagnoses"]
    assert diag["rank"] == 0 and diag["status"] == "timeout", diag
    assert f"rank 0 was stopped (process {pid} in state T" in diag["text"], diag
    assert not r.left()


def test_sighup_of_the_harness_ends_every_process_and_says_hangup(run):
    r = run()
    r.rank0_pid_once_rank1_is_delayed()
    r.proc.send_signal(signal.SIGHUP)
    code, out, report = r.finish()
    assert code == 129, out
    assert report["summary"]["ended"] == "hangup" and report["summary"]["interrupted"], report["summary"]
    assert "Traceback" not in out
    assert poll(lambda: not r.left(), GONE_WITHIN_S, "every process of the run gone") is True


def test_after_sigkill_of_the_harness_no_rank_outlives_a_short_bound(run):
    r = run()
    r.rank0_pid_once_rank1_is_delayed()
    assert len(r.left()) >= 3  # the torchrun agent and both ranks
    r.proc.send_signal(signal.SIGKILL)
    r.proc.wait(timeout=60)
    assert poll(lambda: not r.left(), GONE_WITHIN_S, "every rank gone after the harness was killed") is True
    summary = json.loads((r.run_dir / "report.json").read_text())["summary"]
    # the harness never wrote its last report: the file says so, and it is not green
    assert summary["ended"] == "running, not finished" and summary["result"].startswith("RUNNING")
    assert summary["exit_code"] != 0


def test_first_failure_reads_the_agents_root_cause(tmp_path):
    log = tmp_path / "job0.log"
    log.write_text(
        "E1202 api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 6496) of binary: python\n"
        "Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -15 (pid: 6497)  (SIGTERM)\n"
        "------\nRoot Cause (first observed failure):\n[0]:\n  time      : now\n  host      : h\n"
        "  rank      : 4 (local_rank: 0)\n  exitcode  : -9 (pid: 6496)  (SIGKILL)\n======\n")
    assert first_failure(log) == {4: -9}  # the root cause, not the ranks the agent terminated after it
    log.write_text("E1202 api.py:1002] failed (exitcode: 43) local_rank: 1 (pid: 7) of binary: python\n")
    assert first_failure(log, first_local_rank=8) == {9: 43}
    assert first_failure(tmp_path / "missing.log") == {}
    assert death_words(-19) == "was killed by SIGSTOP (signal 19)" and death_words(2) == "exited with code 2"


def test_a_dead_rank_is_named_ahead_of_an_injected_delay():
    progress = {0: [{"event": "begin", "launch": 1, "pid": 10}],
                1: [{"event": "begin", "launch": 0}, {"event": "delay", "launch": 1}]}
    assert diagnose(progress).rank == 1  # without the launcher's word the delay is all there is
    named = diagnose(progress, exited={0: -9})
    assert named.rank == 0 and named.cause == "signal" and "SIGKILL" in named.text
