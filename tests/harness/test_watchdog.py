"""Watchdog: progress records, the diagnosis of who fell behind, and ending a process tree for certain."""

import os
import subprocess
import sys

from harness.wire.progress import ProgressWriter, read_all_progress, read_progress
from harness.launch.diagnosis import diagnose
from harness.launch import supervision
from harness.launch.supervision import Supervised, processes_with_token
from harness.wire.processes import group_alive


def records(*events):
    """Progress records from (event, launch) pairs."""
    return [{"event": e, "launch": k, "params": {"rows": 2}, "state": {"launches": k}} for e, k in events]


def test_progress_records_are_durable_and_torn_lines_ignored(tmp_path):
    writer = ProgressWriter(tmp_path, 3)
    writer.begin(0, {"rows": 2}, {"launches": 0})
    writer.end(0, {"rows": 2}, {"launches": 1})
    writer.close()
    with open(tmp_path / "rank3.progress.jsonl", "a") as f:
        f.write('{"rank": 3, "launch": 1, "ev')  # a process killed mid-write
    recs = read_progress(tmp_path / "rank3.progress.jsonl")
    assert [(r["event"], r["launch"], r["state"]) for r in recs] == [("begin", 0, {"launches": 0}),
                                                                     ("end", 0, {"launches": 1})]
    assert read_all_progress(tmp_path, 2, first_rank=3) == {3: recs, 4: []}


def test_diagnose_names_the_rank_that_never_began_the_launch():
    progress = {0: records(("begin", 0), ("end", 0), ("begin", 1)),
                1: records(("begin", 0), ("end", 0)),
                2: records(("begin", 0), ("end", 0), ("begin", 1))}
    d = diagnose(progress)
    assert (d.rank, d.launch) == (1, 1)
    assert "rank 1 did not begin launch 1" in d.text and "0, 2" in d.text
    assert d.beliefs[1]["state"] == {"launches": 0} and d.beliefs[0]["launch"] == 1


def test_diagnose_prefers_injected_markers():
    hang = {0: records(("begin", 0), ("end", 0), ("begin", 1)), 1: records(("begin", 0), ("end", 0), ("hang", 1))}
    assert (diagnose(hang).rank, diagnose(hang).launch) == (1, 1)
    repeat = {0: records(("begin", 2), ("end", 2), ("begin", 2), ("end", 2), ("repeat", 2)),
              1: records(("begin", 2), ("end", 2), ("begin", 3))}
    assert (diagnose(repeat).rank, diagnose(repeat).launch) == (0, 2)


def test_diagnose_without_a_laggard_says_so():
    progress = {0: records(("begin", 2)), 1: records(("begin", 2))}
    d = diagnose(progress)
    assert d.rank is None and d.launch == 2 and "no single rank" in d.text


def test_diagnose_uses_kernel_records_when_progress_agrees():
    progress = {0: records(("begin", 0)), 1: records(("begin", 0))}
    d = diagnose(progress, kernel_records=[{"awaited_rank": 1, "step": 3}])
    assert (d.rank, d.step) == (1, 3)


CHILD = r"""
import subprocess, sys, time
# a grandchild in a session of its own, as torchrun starts its workers
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print("up", flush=True)  # the grandchild exists: Popen returns after its exec
time.sleep(600)
"""


def test_expired_tree_is_ended_including_other_sessions():
    sup = Supervised([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, grace_s=1.0)
    assert sup.proc.stdout.readline() == b"up\n"  # the tree is whole before the deadline can run out
    outcome = sup.wait(2.0)
    assert outcome.timed_out
    assert len(outcome.groups) >= 2, outcome.groups  # the child's group and the grandchild's session
    assert outcome.leftovers == []
    assert processes_with_token(sup.token) == {}
    for pgid in outcome.groups:
        assert not group_alive(pgid)


def test_poll_can_end_a_run_early():
    calls = []
    sup = Supervised([sys.executable, "-c", "import time; time.sleep(600)"], grace_s=0.5)
    outcome = sup.wait(60, poll=lambda: calls.append(1) or len(calls) > 3, interval_s=0.05)
    assert len(calls) == 4, "ended by the poll's first True, not asked again"
    assert outcome.timed_out and outcome.elapsed_s < 60 and not group_alive(sup.proc.pid)


def test_the_outcome_says_where_the_end_went(monkeypatch):
    """A child that ignores SIGTERM holds the end for the grace period: ``ending`` shows it, after the deadline."""
    asked = []
    monkeypatch.setattr(supervision, "request_stacks", lambda *args: asked.append(args))
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    sup = Supervised([sys.executable, "-c", ignore], stdout=subprocess.PIPE, grace_s=1.5)
    assert sup.proc.stdout.readline() == b"up\n"  # the handler is in place before the deadline
    outcome = sup.wait(1.0)
    assert outcome.timed_out and set(outcome.ending) == {"decided_s", "stacks_s", "end_s"}
    assert outcome.ending["decided_s"] >= 1.0  # not before the deadline
    assert asked == []  # no stacks directory: none asked for
    assert outcome.ending["end_s"] >= 1.5, outcome.ending  # SIGTERM ignored: SIGKILL only after the grace
    assert outcome.elapsed_s >= outcome.ending["decided_s"] + outcome.ending["end_s"] - 0.01


def test_clean_exit_is_reported():
    sup = Supervised([sys.executable, "-c", "raise SystemExit(3)"], stdout=subprocess.DEVNULL)
    outcome = sup.wait(30)
    assert (outcome.returncode, outcome.timed_out, outcome.leftovers) == (3, False, [])
    assert os.environ.get("RANKCHECK_RUN_TOKEN") is None  # the token is the child's, never ours


def test_ranks_all_inside_a_launch_name_the_one_whose_call_deviates():
    """Kernels given disagreeing calls can all wait inside the launch: the rank that began it with other
    parameters than the call's is the one named (two ranks have no majority to tell it)."""
    from harness.launch.diagnosis import diagnose

    def recs(deviates):
        return [{"event": "begin", "launch": 0, "params": {"rows": 8}}, {"event": "end", "launch": 0},
                {"event": "begin", "launch": 1, "params": {"rows": 8}, "deviates": deviates}]

    d = diagnose({0: recs({}), 1: recs({"rows": [20, 8]})})
    assert (d.rank, d.launch, d.cause) == (1, 1, "disagree")
    assert "rows 20 where the call has 8" in d.text
    same = diagnose({0: recs({}), 1: recs({})})
    assert same.rank is None and "no single rank fell behind" in same.text


def test_a_deviating_call_is_named_ahead_of_a_rank_merely_behind():
    """One virtual rank's kernel trapped (ending the process) before its peer wrote ``begin``: the peer is
    behind, but the rank that began the launch with another call is the cause."""
    from harness.launch.diagnosis import diagnose

    first = [{"event": "begin", "launch": 0, "params": {"rows": 8}}, {"event": "end", "launch": 0}]
    d = diagnose({0: list(first), 1: first + [{"event": "begin", "launch": 1, "params": {"rows": 20},
                                               "deviates": {"rows": [20, 8]}}]})
    assert (d.rank, d.launch, d.cause) == (1, 1, "disagree")
