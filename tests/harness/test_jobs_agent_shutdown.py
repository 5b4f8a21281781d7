"""A node's torchrun agent past the exit barrier is left to shut down by itself; one stuck there is ended and said so.

On several nodes (``harness.launch.jobs``, issue 40) a node whose cases are
all settled ends its agent waiting in torchrun's exit barrier only once
some node's agent has missed the barrier (``NodesDone.any_missed``), never
a grace period after every node is done: by then every agent passes the
barrier and shuts its rendezvous down in the job's store, and a SIGTERM in
that shutdown left a traceback in a healthy node's log. An agent whose
workers have all exited gets ``agent_shutdown_s`` for its shutdown; past it
it is ended and the job says "stuck agent shutdown" in its log and an
error verdict. The store's holder keeps the store until every node's agent
is gone (``JobClock.agents_gone_by`` the backstop).

The process tests run a ``JobRunner`` over a stand-in agent (a Python
process that runs ``test_jobs``'s stand-in worker as its child, then waits
for a release file as its "rendezvous shutdown", writing the time of any
SIGTERM to a file) with a stand-in for the job's store (``FakeStore``).
Nothing is ordered by a sleep: the release file is written by the store's
stand-in after the agent has been polled past the barrier several times
(longer than the harness's grace period, which the old rule ended it
after), and the stuck agent's end is checked against the first poll that
found it alone. The other tests call the watch and the store with the
times given, on a real ``HeldStore`` where a store is needed.
"""

import sys
import textwrap
import time

import pytest

from harness.launch import jobs
from harness.launch.job_clock import JobClock
from harness.launch.job_store import HeldStores, NodesDone
from harness.launch.jobs import JobRunner, JobSettings, _JobWatch
from harness.launch.supervision import Outcome
from harness.scale.nightly import free_ports
from test_jobs import WORKER, case

AGENT = textwrap.dedent('''
    import signal, subprocess, sys, time
    from pathlib import Path
    signalled, release = Path(sys.argv[1]), Path(sys.argv[2])

    def on_term(signum, frame):
        signalled.write_text(repr(time.monotonic()))
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    subprocess.run([sys.executable, *sys.argv[3:]], check=True)  # the workers, to their end
    print("agent: workers exited; shutting the rendezvous down", flush=True)
    while not release.exists():
        time.sleep(0.05)
    print("agent: left by itself", flush=True)
''')
# Polls (0.2 s apart) past every node being done before the stand-in store lets the agent leave: longer than grace_s.
POLLS_BEFORE_RELEASE = 8


class FakeStore:
    """A stand-in for a job's ``NodesDone``: every node done, none missed unless told; what was said, in order."""

    def __init__(self, *, missed: bool = False, on_poll=lambda polls: None) -> None:
        self.said: list[str] = []
        self.missed = missed
        self.polls = 0
        self.on_poll = on_poll

    def _say(self, what: str) -> None:
        """Record ``what`` once, as the real counters count each node once."""
        if what not in self.said:
            self.said.append(what)

    def mark(self) -> None:
        """This node is done with the job."""
        self._say("done")

    def mark_missed(self) -> None:
        """This node's agent never reaches the exit barrier."""
        self._say("missed")

    def mark_exited(self) -> None:
        """This node's agent is gone."""
        self._say("exited")

    def all_done(self) -> bool:
        """Every node is done (always, here)."""
        return True

    def any_missed(self) -> bool:
        """Whether a node missed the barrier, as told; each call is a poll past every node being done."""
        self.polls += 1
        self.on_poll(self.polls)
        return self.missed


def agent_runner(tmp_path, monkeypatch, store: FakeStore, agent_shutdown_s: float) -> tuple[JobRunner, list]:
    """A JobRunner whose jobs run the stand-in agent over ``store``, and the list its verdicts go to."""
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "worker.py").write_text(WORKER)
    settings = JobSettings(launcher="cpu", impl="golden", backend="gloo", run_dir=tmp_path / "run", startup_s=30,
                           case_allowance_s=1.0, grace_s=0.5, agent_shutdown_s=agent_shutdown_s)
    verdicts: list = []

    def argv(s, job, world, i):
        """The stand-in agent, its files and its worker's command line."""
        return [sys.executable, str(tmp_path / "agent.py"), str(tmp_path / "signalled"), str(tmp_path / "release"),
                str(tmp_path / "worker.py"), str(job), str(world)]
    monkeypatch.setattr(JobRunner, "_hold_job_store", lambda self: (store, None))
    return JobRunner(settings, argv, verdicts.append), verdicts


def job_log_text(runner: JobRunner) -> str:
    """The log of the runner's last job."""
    return jobs.job_log(runner.settings, runner.job_index).read_text()


def test_an_agent_past_the_barrier_is_not_signalled_and_leaving_by_itself_is_clean(tmp_path, monkeypatch):
    store = FakeStore(on_poll=lambda polls: polls == POLLS_BEFORE_RELEASE and (tmp_path / "release").touch())
    runner, verdicts = agent_runner(tmp_path, monkeypatch, store, agent_shutdown_s=60.0)
    runner.run([case("basic")], 2)
    log = job_log_text(runner)
    assert not (tmp_path / "signalled").exists(), log
    assert store.polls >= POLLS_BEFORE_RELEASE and "agent: left by itself" in log, log
    assert [(v.family, v.scenario, v.status) for v in verdicts] == [("markov_sharded", "basic", "pass")]
    assert "stuck agent shutdown" not in log
    assert store.said == ["done", "exited"]  # left by itself: it missed no barrier


def test_an_agent_stuck_in_its_shutdown_is_ended_after_its_deadline_and_reported(tmp_path, monkeypatch):
    alone_at: list[float] = []
    real = jobs.only_the_agent_left

    def seen(tree) -> bool:
        """The real question, the time of each yes kept."""
        alone = real(tree)
        if alone:
            alone_at.append(time.monotonic())
        return alone
    monkeypatch.setattr(jobs, "only_the_agent_left", seen)
    store = FakeStore()
    runner, verdicts = agent_runner(tmp_path, monkeypatch, store, agent_shutdown_s=1.5)
    runner.run([case("basic")], 2)
    log = job_log_text(runner)
    assert alone_at, "the agent was never seen without its workers"
    signalled = float((tmp_path / "signalled").read_text())
    assert signalled - alone_at[0] >= 1.5  # not before its deadline, counted from its workers' exit
    assert "rankcheck: stuck agent shutdown: torchrun agent" in log and "agent: left by itself" not in log
    (passed, stuck) = verdicts
    assert (passed.scenario, passed.status) == ("basic", "pass")
    assert (stuck.family, stuck.scenario, stuck.status) == ("job", "node0:job0:agent-shutdown", "error")
    assert "stuck agent shutdown" in stuck.detail
    assert store.said == ["done", "exited"]  # past the barrier: no other node's agent waits there for it


def watch_over(store, *, agent_alone=lambda: False, agent_shutdown_s: float = 60.0) -> _JobWatch:
    """A watch over no live groups (every case settled) with ``store`` and a clock whose times are given."""
    runner = JobRunner(JobSettings(launcher="cpu", impl="golden", backend="gloo", run_dir=None), lambda *a: [],
                       lambda result: None)
    clock = JobClock(job_started=0.0, budgets=100.0, cap=200.0, startup_s=10.0, last_poll=0.0,
                     agent_shutdown_s=agent_shutdown_s)
    return _JobWatch(runner, [], 2, 2, clock, store, agent_alone=agent_alone)


def test_an_agent_waiting_for_a_node_that_missed_the_barrier_is_ended_at_once():
    watch = watch_over(FakeStore(missed=True))
    assert watch.agent_may_go(1.0) and not watch.stuck


def test_the_shutdown_deadline_counts_from_the_workers_exit_and_a_late_miss_still_ends_the_wait():
    alone = {"now": False}
    store = FakeStore()
    watch = watch_over(store, agent_alone=lambda: alone["now"])
    assert not watch.agent_may_go(5.0)  # every node done at 5: its workers still exiting
    alone["now"] = True
    assert not watch.agent_may_go(30.0)  # alone from 30
    assert not watch.agent_may_go(89.0)  # 59 s alone: past any grace period, still its own to leave
    assert watch.agent_may_go(90.5) and watch.stuck

    store = FakeStore()
    watch = watch_over(store, agent_alone=lambda: True)
    assert not watch.agent_may_go(5.0)
    store.missed = True  # a node that said done, then its agent failed: this agent waits in the barrier after all
    assert watch.agent_may_go(6.0) and not watch.stuck


@pytest.mark.parametrize("outcome, passed_barrier, said", [
    (Outcome(0, False, 1.0), False, ["done", "exited"]),
    (Outcome(None, True, 1.0), False, ["missed", "done", "exited"]),  # its watchdog ended it
    (Outcome(1, False, 1.0), False, ["missed", "done", "exited"]),  # its workers failed: no barrier for it
    (Outcome(None, True, 1.0), True, ["done", "exited"]),  # ended in its shutdown: it had passed the barrier
])
def test_a_node_says_it_missed_the_barrier_before_it_says_it_is_done(outcome, passed_barrier, said):
    store = FakeStore()
    watch = watch_over(store)
    watch.runner._leave_job_store(outcome, watch.clock, store, None, passed_barrier=passed_barrier)
    assert store.said == said


def test_the_holder_keeps_the_store_until_every_nodes_agent_is_gone():
    endpoint = f"127.0.0.1:{free_ports(1)}"
    stores = HeldStores()
    held = stores.hold(endpoint, "J-job0", 2)
    nodes = [NodesDone(endpoint, "J-job0", 2) for _ in range(2)]
    watch = watch_over(nodes[0])
    clock, grace_s = watch.clock, watch.runner.settings.grace_s
    clock.case_began(1.0)
    watch.runner._leave_job_store(Outcome(0, False, 1.0), clock, nodes[0], held)  # the holder's node: gone
    nodes[1].mark()  # node 1 is done; its agent still shuts its rendezvous down in the store
    assert not held.finished(clock.others_done_by() + grace_s + 1.0)  # the old deadline: node 1's agent still there
    assert held.deadline == clock.agents_gone_by() + grace_s
    assert held.finished(clock.agents_gone_by() + grace_s + 1.0)  # the backstop
    nodes[1].mark_exited()
    assert held.finished(clock.others_done_by())  # the event: every agent gone
    stores.release_all()
    assert stores.held == []
