"""Spare processes for virtual jobs (harness.launch.spares, harness.rank.standby), with real processes.

A virtual run hands its jobs to spares that started up ahead: the jobs'
verdicts and records are those of fresh processes, each job has a process
of its own, the job's start-up counts from its hand-over, and no spare
outlives the run. A spare is used only for a virtual job of the same
environment, and ends by itself when its parent is gone.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.launch.spares import StandbyPool
from harness.wire.spare_handoff import PARENT_VAR
from harness.scale.memory import processes_mentioning
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def validate(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """``harness validate`` of the tiny scenario at virtual worlds 1, 2 and 4 (golden), one lane."""
    cmd = [sys.executable, "-m", "harness", "validate", "--launcher", "virtual", "--impl", "golden",
           "--scenario", "tiny", "tiny_hang", "--world", "1", "2", "4", "--jobs", "1", "--no-store",
           "--scenario-root", str(SCENARIOS), "--run-dir", str(run_dir), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_virtual_jobs_run_in_spares_with_fresh_verdicts_and_nothing_left(tmp_path):
    proc = validate(tmp_path)
    doc = json.loads((tmp_path / "report.json").read_text())
    statuses = sorted((r["scenario"], r["world"], r["status"]) for r in doc["results"])
    assert ("tiny", 4, "pass") in statuses and ("tiny", 1, "pass") in statuses, statuses
    assert proc.returncode == (0 if all(s == "pass" for *_, s in statuses) else 1), proc.stdout
    handoffs = sorted((tmp_path / "jobs" / "standby").glob("standby-*.json"))
    jobs = sorted((tmp_path / "jobs").glob("job*.json"))
    assert len(handoffs) == len(jobs) >= 3  # every job went to a spare of its own
    handed = [json.loads(h.read_text())["job"] for h in handoffs]
    assert sorted(handed) == sorted(map(str, jobs))
    timings = [json.loads(p.read_text()) for p in (tmp_path / "timing").glob("job*.json")]
    assert len(timings) == len(jobs) and all(t["spare"] in ("ready", "starting") for t in timings), timings
    ranks = [json.loads(p.read_text()) for p in (tmp_path / "cases").glob("*/w*/rank*.result.json")]
    marks = [r["startup"] for r in ranks if r.get("startup")]
    assert marks and all(m["handed"] >= max(m["job"], m["preloaded"]) for m in marks)
    assert "# standby: 2 spare process(es)" in proc.stdout
    assert processes_mentioning(str(tmp_path)) == {}  # the spare started for a next job was ended too


def test_no_standby_starts_each_job_itself(tmp_path):
    proc = validate(tmp_path, "--no-standby")
    statuses = sorted((r["scenario"], r["world"], r["status"])
                      for r in json.loads((tmp_path / "report.json").read_text())["results"])
    assert [s for s in statuses if s[0] == "tiny"] == [("tiny", w, "pass") for w in (1, 2, 4)], statuses
    assert proc.returncode == (0 if all(s == "pass" for *_, s in statuses) else 1), proc.stdout + proc.stderr
    assert not (tmp_path / "jobs" / "standby").exists()
    assert "# standby: off" in proc.stdout


def test_a_spare_fits_only_a_virtual_job_of_its_environment(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with StandbyPool(sys.executable, 1, env=env, cwd=str(ROOT), spare_dir=tmp_path) as pool:
        torchrun = [sys.executable, "-m", "torch.distributed.run", "-m", "harness.rank.worker", "--job", "j.json"]
        assert pool.take(torchrun, env, tmp_path / "log") is None
        virtual = [sys.executable, "-m", "harness.rank.worker", "--job", str(tmp_path / "j.json"), "--virtual", "2"]
        assert pool.take(virtual, dict(env, OMP_NUM_THREADS="99"), tmp_path / "log") is None
        assert pool.handed == 0
    deadline = time.monotonic() + 10
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(tmp_path)) == {}


def test_a_spare_ends_by_itself_when_its_parent_is_gone(tmp_path):
    handoff = tmp_path / "standby-1.json"
    # a parent that starts a spare and exits at once, leaving it to init's care
    # (it names itself as the spare's parent, as StandbyPool does)
    spawn = ("import os, subprocess, sys; "
             f"env = dict(os.environ, {PARENT_VAR}=str(os.getpid())); "
             f"subprocess.Popen([sys.executable, '-m', 'harness.rank.worker', '--standby', {str(handoff)!r}], env=env)")
    parent = subprocess.run([sys.executable, "-c", spawn], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            timeout=60)
    assert parent.returncode == 0
    deadline = time.monotonic() + 90
    while processes_mentioning(str(handoff)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(handoff)) == {}
    assert (tmp_path / "standby-1.json.ready").exists()  # it had started up, then saw its parent gone


def test_no_more_spares_start_up_at_once_than_max_starting(tmp_path):
    """With one start-up slot, the second spare starts only once the first has said it is ready."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    started = lambda: sorted(p.name for p in tmp_path.glob("standby-*.log"))  # noqa: E731
    ready = tmp_path / "standby-1.json.ready"
    with StandbyPool(sys.executable, 2, env=env, cwd=str(ROOT), spare_dir=tmp_path, max_starting=1):
        assert started() == ["standby-1.log"]
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline:
            assert started() == ["standby-1.log"], "a second spare started while the first was starting"
            time.sleep(0.05)
        assert ready.exists(), (tmp_path / "standby-1.log").read_text()
        while len(started()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started() == ["standby-1.log", "standby-2.log"]
    assert processes_mentioning(str(tmp_path)) == {}
