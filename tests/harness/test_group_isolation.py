"""TP groups side by side: a fault in one group ends that group's case only; the others keep their verdicts.

A stand-in worker (no torch) writes the worker's files for a job of world 4
in TP groups of 2 (``case_dir(..., group)``, global ranks): group 0 always
finishes; in group 1 one rank hangs, or crashes while group 0 is still in
its case (the agent ends every rank of the node, so group 0 is cut short
too and must run again, alone). The job runner must settle group 0 as soon
as its own files are complete, judge group 1 alone, name its group, rank
and launch, and run group 0 again where it lost its run. Run-again jobs
name their groups in the job file (``groups``), which the stand-in obeys as
the worker does (``harness.rank.worker.runs_in_group``). A job whose ranks wait
in the rendezvous for nodes still ending the last job (``late``) is not
timed out for it.
"""

import json
import sys
import textwrap
import time

from harness.families.catalog import Case
from harness.launch.jobs import JobRunner, JobSequence, JobSettings
from harness.wire.case_files import runs_in_group

WORLD, TP = 4, 2

WORKER = textwrap.dedent('''
    import json, os, sys, time
    from harness.wire.progress import ProgressWriter
    from harness.wire.case_files import case_dir, result_path, runs_in_group
    job = json.load(open(sys.argv[1]))
    tp, world = job["tp"], 4

    def finish(d, ranks):
        for r in ranks:
            json.dump({"status": "ok", "launches_done": 1, "refused": [], "not_refused": [], "time_s": 0.1,
                       "comparison": {"mismatch_count": 0, "max_ulps": 0, "first": []}}, open(result_path(d, r), "w"))

    for spec in job["cases"]:
        if spec["name"] == "late":
            time.sleep(2.5)  # in the rendezvous, waiting for nodes still ending the last job
        groups = [g for g in range(world // tp) if runs_in_group(spec, g)]
        dirs = {g: case_dir(job["run_dir"], spec["family"], spec["name"], tp, g) for g in groups}
        writers = {r: ProgressWriter(dirs[r // tp], r) for g in groups for r in range(g * tp, g * tp + tp)}
        for r, w in writers.items():
            w.write("start", -1)
            w.begin(0, {"rows": 2}, {"launches": 0})
        if spec["name"] == "crash" and 1 in groups:
            writers[3].write("crash", 0, {"rows": 2}, {"launches": 0}, how="exit")
            os._exit(43)  # the agent then ends every rank of the node, group 0's too
        hangs = spec["name"] == "hang" and 1 in groups
        if hangs:  # said before group 0 finishes: its verdict may come at once, and must find the hang begun
            writers[3].write("hang", 0, {"rows": 2}, {"launches": 0})
            with open(os.path.join(job["run_dir"], "hanging.pid"), "w") as f:
                f.write(str(os.getpid()))
        if 0 in groups:
            for r in (0, 1):
                writers[r].end(0, {"rows": 2}, {"launches": 1})
            finish(dirs[0], (0, 1))
        if hangs:
            time.sleep(600)
        if 1 in groups:
            for r in (2, 3):
                writers[r].end(0, {"rows": 2}, {"launches": 1})
            finish(dirs[1], (2, 3))
''')


def case(name: str) -> Case:
    """A golden-outcome case of one launch with a 2 s per-launch deadline."""
    return Case("markov_sharded", name, "", (TP,), "cpu", ("golden",), None, None, 1, None, 2.0, "", ())


def _hanging_rank_alive(pid_file) -> bool:
    """Whether the stand-in's hanging rank has said its pid and is still running (not ended, not a zombie)."""
    try:
        stat = open(f"/proc/{int(pid_file.read_text())}/stat").read()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def runner(tmp_path, startup_s: float = 30, numbers: JobSequence | None = None) -> tuple[JobRunner, list]:
    """A cpu-launcher JobRunner over the stand-in, TP groups of 2 in a world of 4, and the list its verdicts go to."""
    script = tmp_path / "fake_worker.py"
    script.write_text(WORKER)
    settings = JobSettings(launcher="cpu", impl="golden", backend="gloo", run_dir=tmp_path / "run", tp=TP,
                           startup_s=startup_s, case_allowance_s=1.0, grace_s=0.5)
    verdicts: list = []

    def add(result):
        """Keep a verdict with whether the hanging rank (if any) was still in its hang when it was given."""
        verdicts.append((_hanging_rank_alive(tmp_path / "run" / "hanging.pid"), result))

    return JobRunner(settings, lambda s, job, world, i: [sys.executable, str(script), str(job)], add,
                     job_numbers=numbers), verdicts


def test_a_hang_in_one_group_leaves_the_other_groups_verdict_given_at_once_and_kept(tmp_path):
    job, verdicts = runner(tmp_path)
    job.run([case("hang")], WORLD)
    assert [r.group for _, r in verdicts] == [0, 1], "group 0's verdict first"
    (hang_on0, healthy), (hang_on1, bad) = verdicts
    assert healthy.status == "pass", healthy.detail
    assert hang_on0, "group 0 settled from its own files while group 1's rank was still hanging"
    assert not hang_on1, "group 1 judged after its hanging rank was ended"
    assert bad.status == "timeout"
    assert "TP group 1 (ranks 2-3), global rank 3: rank 1 hung before launch 0" in bad.detail
    assert (bad.diagnosis["group"], bad.diagnosis["rank"], bad.diagnosis["launch"]) == (1, 1, 0)
    timing = json.loads((tmp_path / "run" / "timing" / "job0.json").read_text())
    assert [(v["group"], v["status"], bool(v["expired"])) for v in timing["verdicts"]] == [
        (0, "pass", False), (1, "timeout", True)]
    assert timing["timed_out"] and timing["spare"] is None  # no standby pool here: the job started its own process
    assert set(timing["ending"]) == {"decided_s", "stacks_s", "end_s"} and timing["ending"]["decided_s"] > 0


def test_a_crash_in_one_group_is_judged_there_and_the_group_it_cut_short_runs_again_alone(tmp_path):
    job, verdicts = runner(tmp_path)
    job.run([case("crash")], WORLD)
    got = sorted((r.group, r.status) for _, r in verdicts)
    assert got == [(0, "pass"), (1, "error")], [r.detail for _, r in verdicts]
    (bad,) = [r for _, r in verdicts if r.group == 1]
    assert "TP group 1 (ranks 2-3), global rank 3: rank 1 crashed before launch 0" in bad.detail
    jobs = sorted((tmp_path / "run" / "jobs").glob("job*.json"))
    assert [p.name for p in jobs] == ["job0.json", "job1.json"]
    again = json.loads(jobs[1].read_text())["cases"]
    assert [(c["name"], c["groups"]) for c in again] == [("crash", [0])]  # group 0 only: group 1 has its verdict
    assert "groups" not in json.loads(jobs[0].read_text())["cases"][0]


def test_the_startup_allowance_counts_from_when_the_other_nodes_can_join(tmp_path):
    """A node whose last job ended early waits in the next rendezvous for nodes still ending theirs: not its startup."""
    numbers = JobSequence()
    # the other nodes end the last job 30 s from now: far past the stand-in's 2.5 s in the rendezvous, however slow
    # the machine, while 2.5 s is past the 1 s allowance had it counted from now
    numbers.others_free_at = time.monotonic() + 30.0
    job, verdicts = runner(tmp_path, startup_s=1.0, numbers=numbers)
    job.run([case("late")], WORLD)  # no progress record for 2.5 s, past a 1 s allowance counted from now
    assert sorted((r.group, r.status) for _, r in verdicts) == [(0, "pass"), (1, "pass")], [
        r.detail for _, r in verdicts]


def test_a_job_file_case_runs_in_the_groups_it_names():
    assert runs_in_group({"name": "a"}, 3) and runs_in_group({"name": "a"}, None)
    assert runs_in_group({"groups": [0, 2]}, 2) and not runs_in_group({"groups": [0, 2]}, 1)


def test_a_node_polls_only_its_own_ranks_files_of_a_group(tmp_path):
    """On a run directory shared by the nodes, the other node's ranks of a group are not this node's to poll."""
    from harness.launch import records
    from harness.wire.progress import ProgressWriter
    from harness.wire.case_files import CaseId, case_dir, result_path

    directory = case_dir(tmp_path, "markov_sharded", "basic", 4, None)
    for rank in (2, 3):  # written by the other node
        ProgressWriter(directory, rank).begin(0, {"rows": 2}, {"launches": 0})
        result_path(directory, rank).write_text('{"status": "ok"}')
    mine = (0, 1)
    case = CaseId("markov_sharded", "basic", 4, None, 4)
    assert not records.case_started(tmp_path, case, mine)
    activity = records.latest_activity(tmp_path, case, mine)
    assert (activity.newest, activity.begun) == (None, False)
    assert records.read_results(tmp_path, case, mine) == {}
    assert sorted(records.read_results(tmp_path, case)) == [2, 3]
