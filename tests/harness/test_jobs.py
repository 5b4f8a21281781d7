"""JobRunner recovery without torch: a stand-in worker that finishes, abandons a job, or hangs.

The stand-in writes the worker's files (progress records and per-rank
results, same layout) for a two-rank job, so the scheduling is tested on
its own: finished cases are judged as they arrive; a job that ends early
(a rank abandoned it) or is ended by the watchdog (a hang) settles the case
it was in, and the cases after it run in a fresh job.
"""

import sys
import textwrap
from pathlib import Path

from harness.families.catalog import Case
from harness.launch.jobs import JobRunner, JobSettings

WORKER = textwrap.dedent('''
    import json, os, sys, time
    from harness.wire.progress import ProgressWriter
    from harness.wire.case_files import ABANDON_EXIT, case_dir, result_path
    job = json.load(open(sys.argv[1]))
    world = int(sys.argv[2])
    for spec in job["cases"]:
        d = case_dir(job["run_dir"], spec["family"], spec["name"], world, None)
        writers = [ProgressWriter(d, r) for r in range(world)]
        for w in writers:
            w.write("start", -1)
        if spec["name"] == "hang":
            writers[0].begin(0, {"rows": 2}, {"launches": 0})
            time.sleep(600)
        if spec["name"] == "slow_reference":  # 4 s on the reference, beyond the 3 s case budget, beating
            for w in writers:
                w.write("reference", 0)
            for _ in range(8):
                time.sleep(0.5)
                for w in writers:
                    w.touch()
        if spec["name"] == "abandon_all":  # every rank fails and abandons; the next case had just started
            for r in range(world):
                json.dump({"status": "error", "abandon": True, "error": {"type": "ValueError",
                           "types": ["ValueError"], "message": "bad anchor", "phase": "launch 0"}},
                          open(result_path(d, r), "w"))
            nxt = job["cases"][job["cases"].index(spec) + 1]
            ProgressWriter(case_dir(job["run_dir"], nxt["family"], nxt["name"], world, None), 0).write("start", -1)
            sys.exit(ABANDON_EXIT)
        for r, w in enumerate(writers):
            w.begin(0, {"rows": 2}, {"launches": 0})
            if spec["name"] == "abandon" and r == 1:
                w.write("error", -1, error="RuntimeError: boom")
                res = {"status": "error", "error": {"type": "RuntimeError", "types": ["RuntimeError"],
                       "message": "boom", "phase": "launch 0"}, "abandon": True}
                os.makedirs(d, exist_ok=True)
                json.dump(res, open(result_path(d, r), "w"))
                sys.exit(ABANDON_EXIT)
            w.end(0, {"rows": 2}, {"launches": 1})
        for r in range(world):
            json.dump({"status": "ok", "launches_done": 1, "refused": [], "not_refused": [],
                       "comparison": {"mismatch_count": 0, "max_ulps": 0, "first": []}},
                      open(result_path(d, r), "w"))
''')


def case(name: str) -> Case:
    """A golden-outcome case of one launch with a 2 s per-launch deadline."""
    return Case("markov_sharded", name, "", (2,), "cpu", ("golden",), None, None, 1, None, 2.0, "", ())


def fake_runner(tmp_path) -> tuple[JobRunner, list]:
    """A cpu-launcher JobRunner over the fake worker, with short allowances, and the list its verdicts go to."""
    script = tmp_path / "fake_worker.py"
    script.write_text(WORKER)
    settings = JobSettings(launcher="cpu", impl="golden", backend="gloo", run_dir=tmp_path / "run",
                           startup_s=30, case_allowance_s=1.0, grace_s=0.5)
    verdicts: list = []
    runner = JobRunner(settings, lambda s, job, world, i: [sys.executable, str(script), str(job), str(world)],
                       verdicts.append)
    return runner, verdicts


def test_recovery_after_abandon_and_hang(tmp_path):
    runner, verdicts = fake_runner(tmp_path)
    # no speed bound: a hang the watchdog left alone would sleep out its 600 s and then pass, failing the verdicts
    runner.run([case(n) for n in ("a", "abandon", "c", "hang", "d")], 2)
    got = {(v.scenario, v.status) for v in verdicts}
    assert got == {("a", "pass"), ("abandon", "error"), ("c", "pass"), ("hang", "timeout"), ("d", "pass")}, verdicts
    by_name = {v.scenario: v for v in verdicts}
    assert "rank 1" in by_name["abandon"].detail and "boom" in by_name["abandon"].detail
    assert by_name["hang"].diagnosis["rank"] == 1 and by_name["hang"].diagnosis["launch"] == 0
    jobs = sorted(p.name for p in (tmp_path / "run" / "jobs").iterdir())
    assert jobs == ["job0.json", "job1.json", "job2.json"]  # a+abandon, c+hang, d


def test_case_after_an_abandoned_case_reruns_and_reference_time_is_not_the_case_budget(tmp_path):
    runner, verdicts = fake_runner(tmp_path)
    runner.run([case(n) for n in ("abandon_all", "after", "slow_reference")], 2)
    got = {v.scenario: v.status for v in verdicts}
    assert got == {"abandon_all": "error", "after": "pass", "slow_reference": "pass"}, verdicts
    jobs = sorted(p.name for p in (tmp_path / "run" / "jobs").iterdir())
    assert jobs == ["job0.json", "job1.json"]  # abandon_all (+ the case it cut short), then after + slow_reference


def test_a_case_judged_after_its_job_ended_keeps_the_time_its_ranks_measured():
    from harness.launch.jobs import _ranks_time

    from harness.wire.rank_result import RankResult

    assert _ranks_time({None: {0: RankResult(time_s=1.5), 1: RankResult(time_s=2.25)}, 1: {0: RankResult(time_s=0.5)}}) == 2.25
    assert _ranks_time({None: {}}) == 0.0
    assert _ranks_time({None: {0: RankResult(status="error")}}) == 0.0


def test_a_node_clears_only_its_own_ranks_files(tmp_path):
    from types import SimpleNamespace

    from harness.launch.torchrun_options import Rendezvous
    from harness.launch.records import clear_rank_files
    from harness.wire.progress import progress_path
    from harness.wire.case_files import case_dir, result_path

    case = SimpleNamespace(family="markov_fused", name="basic")
    directory = case_dir(tmp_path, case.family, case.name, 4, None)
    directory.mkdir(parents=True)
    for rank in range(4):
        result_path(directory, rank).write_text("{}")
        progress_path(directory, rank).write_text("{}\n")
    node1 = Rendezvous(nnodes=2, node_rank=1, nproc_per_node=2)
    assert list(node1.local_ranks(4)) == [2, 3] and list(Rendezvous().local_ranks(4)) == [0, 1, 2, 3]
    assert clear_rank_files(tmp_path, [case], 4, [None], node1.local_ranks(4)) == 4
    assert sorted(p.name for p in directory.iterdir()) == ["rank0.progress.jsonl", "rank0.result.json",
                                                           "rank1.progress.jsonl", "rank1.result.json"]
