"""Hang evidence: the hung rank's Python stack, every rank's log, the NCCL flight recorder's settings and dumps.

Unit tests use real faulthandler dumps of this process (a thread parked in
a named function) and a stand-in process tree shaped like torchrun's: an
"agent" whose command line names ``harness.rank.worker`` only after its own
``-m`` (it must never get SIGUSR1, whose default action would end it) and a
worker started as ``-m harness.rank.worker`` that registers the stack dump. The
process tests run the injected hang of tests/harness/scenarios (rank 1
hangs before launch 1, at world 2) with the cpu launcher (torchrun + gloo,
a process per rank) and with the virtual launcher (ranks as threads of one
process), and check that the report's diagnosis carries rank 1's stack with
``_sleep_forever`` (the injected hang's frame in harness/rank/faults.py), the
other rank's without it, and each rank's log path (files that exist).
"""

import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

from harness.launch.evidence import flight_recorder_env, nccl_dumps, rank_stacks, thread_frames, torchrun_rank_log
from harness.wire import worker_evidence
from harness.families import catalog
from harness.launch.launchers import settings_for
from harness.launch.records import CaseEnd
from harness.launch.verdict import judge
from harness.launch.diagnosis import diagnose
from harness.launch.supervision import Supervised, processes_with_token
from test_cpu_launcher import SCENARIOS, harness, processes_of, report

ROOT = Path(__file__).resolve().parents[2]
HUNG_FRAME = "_sleep_forever"


class Parked:
    """A thread of this process parked in a function of a known name: first one place, then (told to) another."""

    def __init__(self) -> None:
        self.at_first, self.leave_first = threading.Event(), threading.Event()
        self.at_second, self.leave_second = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.at_first.wait(10)

    def _run(self) -> None:
        """Park in the first place, then in the second."""
        self._first_place_parked()
        self._second_place_parked()

    def _first_place_parked(self) -> None:
        """Wait here until told to move on."""
        self.at_first.set()
        self.leave_first.wait(30)

    def _second_place_parked(self) -> None:
        """Wait here until told to stop."""
        self.at_second.set()
        self.leave_second.wait(30)

    def move_on(self) -> None:
        """Let the thread go from its first parking place to its second."""
        self.leave_first.set()
        assert self.at_second.wait(10)

    def stop(self) -> None:
        """Let the thread end."""
        self.leave_first.set()
        self.leave_second.set()
        self.thread.join(10)


def dump_all_threads(path: Path) -> None:
    """Append a faulthandler dump of every thread of this process to ``path``."""
    with open(path, "a", encoding="utf-8") as f:
        faulthandler.dump_traceback(f, all_threads=True)


def named(frames, name) -> bool:
    """Whether any frame line is in function ``name``."""
    return any(line.endswith(f" in {name}") for line in frames)


def test_a_dump_is_cut_to_the_thread_that_wrote_each_ranks_records(tmp_path):
    parked = Parked()
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    try:
        dump_all_threads(worker_evidence.stack_path(stacks, os.getpid()))
        first = (worker_evidence.stack_path(stacks, os.getpid())).read_text()
        parked.move_on()
        dump_all_threads(worker_evidence.stack_path(stacks, os.getpid()))  # asked again later: the last dump counts
    finally:
        parked.stop()
    me = threading.get_ident()
    progress = {0: [{"event": "start", "pid": os.getpid(), "thread": me}],
                1: [{"event": "start", "pid": os.getpid(), "thread": parked.thread.ident}],
                2: [{"event": "start", "pid": os.getpid(), "thread": 1}],  # a thread the dump does not hold
                3: []}  # never wrote a record
    found = rank_stacks(progress, stacks)
    assert set(found) == {0, 1}
    assert named(found[1], "_second_place_parked") and not named(found[1], "_first_place_parked")
    assert named(thread_frames(first, parked.thread.ident), "_first_place_parked")
    assert not named(found[0], "_second_place_parked")
    assert named(found[0], "test_a_dump_is_cut_to_the_thread_that_wrote_each_ranks_records")
    # innermost first, cut to the count asked for
    assert thread_frames(first, me, 2) == thread_frames(first, me)[:2] and len(thread_frames(first, me, 2)) == 2


FAKE_WORKER = """
import importlib.util, os, sys, threading, time
spec = importlib.util.spec_from_file_location("rankcheck_worker_evidence", {evidence!r})
evidence = importlib.util.module_from_spec(spec)
spec.loader.exec_module(evidence)
evidence.register_worker({run_dir!r})
with open(os.path.join({run_dir!r}, "ready.tmp"), "w") as f:
    f.write(str(threading.get_ident()))
os.replace(os.path.join({run_dir!r}, "ready.tmp"), os.path.join({run_dir!r}, "ready"))

def _sleep_forever():
    while True:
        time.sleep(3600)

_sleep_forever()
"""

FAKE_AGENT = """
import os, subprocess, sys, time
run_dir = sys.argv[-1]
os.makedirs(os.path.join(run_dir, "stacks"), exist_ok=True)
# a stack file as a registered worker has: only the command line tells this agent apart
open(os.path.join(run_dir, "stacks", f"{os.getpid()}.txt"), "w").close()
subprocess.Popen([sys.executable, "-u", "-m", "harness.rank.worker", "--job", run_dir], start_new_session=True)
time.sleep(600)
"""


def test_an_expired_tree_dumps_its_workers_stacks_but_never_signals_the_agent(tmp_path):
    fake = tmp_path / "fake"
    (fake / "harness" / "rank").mkdir(parents=True)
    (fake / "harness" / "__init__.py").write_text("")
    (fake / "harness" / "rank" / "__init__.py").write_text("")
    run_dir = tmp_path / "run"
    (fake / "harness" / "rank" / "worker.py").write_text(
        FAKE_WORKER.format(evidence=str(Path(worker_evidence.__file__)), run_dir=str(run_dir)))
    (fake / "fakeagent.py").write_text(FAKE_AGENT)
    env = dict(os.environ, PYTHONPATH=str(fake), **{worker_evidence.NCCL_TRACE_PREFIX_VAR: str(run_dir / "trace" / "rank_")})
    argv = [sys.executable, "-m", "fakeagent", "-m", "harness.rank.worker", str(run_dir)]
    sup = Supervised(argv, env=env, cwd=str(fake), grace_s=1.0, stacks_dir=worker_evidence.stacks_dir(run_dir))
    outcome = sup.wait(60, poll=lambda: (run_dir / "ready").exists(), interval_s=0.05)
    assert outcome.timed_out and outcome.elapsed_s < 60
    # the agent ended by the watchdog's SIGTERM, not by a SIGUSR1 meant for workers
    assert outcome.returncode == -signal.SIGTERM, outcome
    assert outcome.leftovers == [] and processes_with_token(sup.token) == {}
    worker_thread = int((run_dir / "ready").read_text())
    dumps = {p: p.read_text() for p in worker_evidence.stacks_dir(run_dir).glob("*.txt")}
    assert sorted(len(d) > 0 for d in dumps.values()) == [False, True]  # the agent's file stayed empty
    (worker_dump,) = [d for d in dumps.values() if d]
    assert thread_frames(worker_dump, worker_thread)[0].endswith(f" in {HUNG_FRAME}")
    assert (run_dir / "trace").is_dir()  # register_worker made the flight recorder's directory


def test_nccl_groups_get_the_flight_recorder_and_others_do_not(tmp_path):
    nccl = settings_for("torchrun", tmp_path, 2, gpus=2)
    assert nccl.backend == "nccl"
    assert nccl.env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and int(nccl.env["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0
    assert Path(nccl.env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]).parent == tmp_path / "nccl_trace"
    for launcher, gpus in (("torchrun", 1), ("cpu", 0), ("virtual", 1)):
        other = settings_for(launcher, tmp_path, 2, gpus=gpus)
        assert other.backend != "nccl" and not set(flight_recorder_env(tmp_path)) & set(other.env), launcher


def test_only_the_jobs_own_flight_recorder_dumps_are_listed(tmp_path):
    env = flight_recorder_env(tmp_path)
    trace = Path(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"])
    trace.parent.mkdir()
    old, new = Path(f"{trace}0"), Path(f"{trace}1")
    old.write_text("an earlier job's")
    os.utime(old, (time.time() - 600, time.time() - 600))
    new.write_text("this job's")
    (trace.parent / "unrelated").write_text("")
    assert nccl_dumps(env, since=time.time() - 60) == [str(new)]
    assert nccl_dumps({}, since=0) == []


def test_the_newest_torchrun_log_of_a_local_rank_is_found(tmp_path):
    earlier = tmp_path / "run_a" / "attempt_0" / "1" / "stderr.log"
    later = tmp_path / "run_b" / "attempt_0" / "1" / "stderr.log"
    for path, age in ((earlier, 600), (later, 0)):
        path.parent.mkdir(parents=True)
        path.write_text("log")
        os.utime(path, (time.time() - age, time.time() - age))
    assert torchrun_rank_log(tmp_path, 1) == later
    assert torchrun_rank_log(tmp_path, 0) is None


def test_the_verdict_detail_shows_the_laggards_innermost_frames_and_every_log(tmp_path):
    parked = Parked()
    path = tmp_path / "dump.txt"
    try:
        dump_all_threads(path)
    finally:
        parked.stop()
    frames = thread_frames(path.read_text(), parked.thread.ident)
    progress = {0: [{"event": "begin", "launch": 1, "params": {}, "state": {}}],
                1: [{"event": "hang", "launch": 1, "params": {}, "state": {}}]}
    logs = {0: tmp_path / "rank0.log", 1: tmp_path / "rank1.log"}
    diagnosis = diagnose(progress, stacks={1: frames}, logs=logs, nccl_dumps=[str(tmp_path / "rank_1")])
    case = catalog.case_of(catalog.load(SCENARIOS / "markov_sharded" / "tiny_hang.yaml"))
    verdict = judge(case, world=2, launcher="cpu", impl="golden", group=None, results={},
                    end=CaseEnd(completed=False, timed_out=True), diagnosis=diagnosis, time_s=1.0)
    assert verdict.status == "pass", verdict.detail
    assert "rank 1 hung before launch 1" in verdict.detail
    assert "_first_place_parked" in verdict.detail
    assert f"rank 0 {logs[0]}" in verdict.detail and f"rank 1 {logs[1]}" in verdict.detail
    assert str(tmp_path / "rank_1") in verdict.detail
    assert verdict.diagnosis["stacks"] == {1: frames} and verdict.diagnosis["logs"] == {r: str(p) for r, p in logs.items()}


def hang_diagnosis(tmp_path, *launcher_args):
    """Run the injected hang (rank 1 before launch 1, world 2) and return its report entry and diagnosis."""
    proc = harness("validate", *launcher_args, "--scenario", "tiny_hang", run_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the scenario expects this timeout
    (res,) = report(tmp_path)["results"]
    assert res["status"] == "pass", res
    assert processes_of(tmp_path) == []
    return res, res["diagnosis"]


def test_torchrun_hang_report_carries_the_hung_ranks_stack_and_every_ranks_log(tmp_path):
    res, diagnosis = hang_diagnosis(tmp_path, "--launcher", "cpu")
    stacks, logs = diagnosis["stacks"], diagnosis["logs"]
    assert named(stacks["1"], HUNG_FRAME), stacks
    assert "0" in stacks and not named(stacks["0"], HUNG_FRAME), stacks  # rank 0 waits in the exchange
    assert HUNG_FRAME in res["detail"]
    assert set(logs) == {"0", "1"} and logs["0"] != logs["1"]
    for rank, path in logs.items():
        assert Path(path).is_file() and Path(path).name == "stderr.log" and Path(path).parent.name == rank
        assert path in res["detail"]


def test_virtual_hang_stack_is_the_hung_ranks_thread(tmp_path):
    res, diagnosis = hang_diagnosis(tmp_path, "--launcher", "virtual", "--impl", "golden")
    stacks, logs = diagnosis["stacks"], diagnosis["logs"]
    assert named(stacks["1"], HUNG_FRAME), stacks
    assert "0" in stacks and not named(stacks["0"], HUNG_FRAME), stacks  # another thread of the same process
    assert HUNG_FRAME in res["detail"]
    assert set(logs) == {"0", "1"} and Path(logs["0"]).is_file() and logs["0"] == logs["1"]
