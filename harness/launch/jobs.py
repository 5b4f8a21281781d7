"""Running cases as jobs: batching, per-group settling and deadlines, and recovery after a job ends early.

Starting torchrun costs seconds (interpreters, torch import, rendezvous),
so cases that cannot hang or kill their ranks run many to a job; a case that
may (an injected hang, crash, skipped or repeated launch, disagreeing ranks,
an expected timeout) runs in a job of its own, unless its family's kernels
settle its faults in step (``Case.isolated``): it then runs at the end of the
batch. A job is one supervised
process tree (``harness.launch.supervision.Supervised``) running ``harness.rank.worker``
over a job file; its cases run in order.

With ``--tp`` a job runs several TP groups side by side, and each goes its
own way through the job's cases (``harness.launch.groups.GroupRun``).
While the job runs, the loop polls the run directory: a group's case whose
ranks (on this node) have all written their results is judged and reported
at once, whatever the other groups are doing. Each group's case has its own
clock: the startup allowance until its first progress record appears (for
its first case), then the per-launch deadline times the case's launches
plus a per-case allowance (input building and the reference); time a rank
spends on the unsharded reference (its last record is ``reference`` and its
heartbeat is fresh: a realistic-size golden reference takes minutes on a
CPU) stops that clock. When a group's clock runs out the watchdog asks the
workers for their Python stacks and ends the whole tree; that group's case
is judged from its records (a timeout naming the group, the rank and the
launch, with the rank's innermost frames and log: ``harness.launch.evidence``),
while the groups that finished keep the verdicts they were given from their
own files. A job that ends early (a crash, or a rank that gave the job up
after an unexpected error) is handled the same way without waiting: the
group whose ranks failed is judged. A group whose case was cut short by
another group's fault (the agent ends every rank of the node), and the
cases a group had not begun, run again in a fresh job, in those groups only
(``groups`` in the job file); a case cut short twice is judged as it stands.
With several nodes nothing runs again: every node must start the same jobs
in the same order (their rendezvous ids are job numbers), so a node cannot
add one of its own; such cases are reported as not run.

On several nodes the job's rendezvous store is held by the harness on the
endpoint's machine, not by a torchrun agent (``harness.launch.job_store``),
so the watchdog ending one node's agent takes no other node's job with it.
A node whose cases are all settled still has its agent waiting in
torchrun's exit barrier for every other node's agent (up to 300 s). Which
way it leaves is told by events in the job's store, not by grace periods
(``harness.launch.job_store``): a node whose agent did not leave by itself
(its watchdog ended it, or its workers failed) says it missed the barrier,
and every node whose cases are settled then ends its own waiting agent at
once; failing any word, once every case of the job would have run out of
time on any node (``harness.launch.job_clock.EXIT_BARRIER_MARGIN_S`` after
the budgets). A node whose group hangs thus costs the job about its
deadline, not torchrun's 300 s. Once every node has said it is done and
none missed, every agent passes the barrier and shuts its rendezvous down
by itself, and its harness sends it nothing: a SIGTERM in that shutdown,
whoever finishes last, is what left a traceback in a healthy node's log
(issue 40). Only an agent still there ``JobSettings.agent_shutdown_s``
(``contracts.deadlines.AGENT_SHUTDOWN_S``) after its workers have all
exited is ended, and the job says "stuck agent shutdown" in its log and in
an error verdict (``stuck_shutdown_result``), so the exit code tells the
truth. Once its agent's process tree is gone, each node says so in another
counter; the holder keeps the store until every node has (an agent leaving
by itself still shuts its rendezvous down in the store), or until the
job's last deadline (``JobClock.agents_gone_by``) and a grace period, and
meanwhile goes on: the next job meets at the endpoint's port plus its job
number (``Rendezvous.job_endpoint``), in a store of its own.

Each job leaves ``timing/job<i>[.node<k>].json``: its start, whether a
standby spare ran it (``ready`` or still ``starting`` when handed the job),
its end, how it ended and where the end went (``ending``: seconds until the
wait decided, asking for stacks, ending the tree), when each verdict was
given (``harness.scale`` reads it), and ``after_last_verdict_s``: how long
the job's process tree took to end once its last verdict was given (a job
that ended by itself: the ranks' exit, which ends their CUDA contexts
(``harness.rank.worker.leave_now``: no interpreter teardown), the torchrun
agent's exit; ``JobRunner.after_verdicts_s`` sums it over a runner's jobs for
the unit timeline).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from contracts.deadlines import AGENT_SHUTDOWN_S
from harness.launch.load_scale import CASE_ALLOWANCE_S, STARTUP_S
from harness.wire.case_files import CaseId
from harness.wire.tp_groups import group_ranks, tp_size
from harness.launch import flight_evidence
from harness.launch import gpu_neighbours
from harness.launch.evidence import nccl_dumps, rank_stack_files, rank_stacks, torchrun_rank_log
from harness.wire.worker_evidence import stacks_dir
from harness.wire.processes import HARNESS_VAR, this_process
from harness.families.catalog import Case
from harness.launch import records
from harness.launch.groups import GroupRun, case_budget
from harness.launch.job_clock import JobClock
from harness.launch.job_store import HeldStores, NodesDone
from harness.launch.torchrun_options import Rendezvous
from harness.launch.verdict import judge
from harness.wire.rank_result import RankResult
from harness.wire.case_result import CaseResult
from harness.launch.diagnosis import diagnose, kernel_diag_records
from harness.launch.rank_deaths import first_failure, stopped_ranks
from harness.launch.supervision import Supervised, processes_with_token

if TYPE_CHECKING:
    from harness.launch.spares import StandbyPool

REPO_ROOT = Path(__file__).resolve().parents[2]
# The most a job may run beyond its budget on reference computations (the backstop of every job).
REFERENCE_ALLOWANCE_S = 3600.0


@dataclass
class JobSettings:
    """Everything a launcher needs to run jobs (from the CLI)."""

    launcher: str
    impl: str
    backend: str
    run_dir: Path
    per_launch_s: float | None = None
    startup_s: float = STARTUP_S
    case_allowance_s: float = CASE_ALLOWANCE_S
    grace_s: float = 3.0
    # How long an agent past torchrun's exit barrier, its workers all gone, may take to leave by itself.
    agent_shutdown_s: float = AGENT_SHUTDOWN_S
    tp: int | None = None
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    store: str | None = None
    env: dict = field(default_factory=dict)
    # The reference cache the ranks share (harness.references.cache); None: the run's own <run>/refcache.
    cache_dir: Path | None = None
    # Spare processes for virtual jobs (harness.launch.spares.StandbyPool); None: each job starts its own.
    standby: StandbyPool | None = None
    # Set once no new job may start (validate -x after the first failure); None: never.
    stop: threading.Event | None = None


ArgvBuilder = Callable[[JobSettings, Path, int, int], list[str]]


class JobSequence:
    """The run's job numbers, shared by its JobRunners (one per unit); with several nodes, the job stores this
    harness holds and when the other nodes can start the next job.

    A node whose job ended early (its group hung or crashed) starts the next
    job while the other nodes may still be ending theirs: its startup
    allowance then counts from ``others_free_at`` (monotonic time), when
    every node has ended that job."""

    def __init__(self, numbers: Iterator[int] | None = None) -> None:
        self._numbers = numbers if numbers is not None else itertools.count()
        self.others_free_at = 0.0
        self.stores = HeldStores()

    def __iter__(self) -> "JobSequence":
        return self

    def __next__(self) -> int:
        """The next job number (``next`` on a count is atomic in CPython: lanes may share it)."""
        return next(self._numbers)


@dataclass(frozen=True)
class Pending:
    """A case still to run, and the TP groups of this node it still has to run in."""

    case: Case
    groups: tuple[int | None, ...]


class JobRunner:
    """Runs cases at one world size through a launcher's argv builder, reporting each group's verdict."""

    def __init__(self, settings: JobSettings, argv_for: ArgvBuilder, on_result: Callable[[CaseResult], None],
                 on_note: Callable[[str], None] = lambda text: None, job_numbers: Iterator[int] | None = None) -> None:
        self.settings = settings
        self.argv_for = argv_for
        self.on_result = on_result
        self.on_note = on_note
        self.job_numbers = job_numbers if isinstance(job_numbers, JobSequence) else JobSequence(job_numbers)
        self.job_index = 0
        self.exited: dict[int, int] = {}
        self.stopped: dict[int, int] = {}
        self.job_started_wall = time.time()
        self.job_started_monotonic = time.monotonic()
        # (case key, group) -> times the case was cut short in that group by another group's fault
        self.cut_short: dict[tuple[str, int | None], int] = {}
        # the current job's verdicts as they were given (case, group, status, wall time): its timing file
        self.verdict_times: list[dict] = []
        # seconds its jobs' processes took to end after their last verdict, summed (the unit timeline's split)
        self.after_verdicts_s = 0.0

    # -- scheduling

    def run(self, cases: Sequence[Case], world: int) -> None:
        """Run every case at ``world`` ranks (TP size ``settings.tp`` or ``world``): batched, then isolated."""
        tp = tp_size(self.settings.tp, world)
        groups = tuple(self._groups(world, tp))
        # the batch's injected faults (those the family settles in step) after its healthy cases: should one hang
        # after all, only the cases after it run again
        settled_last = sorted(cases, key=lambda c: bool(set(c.harness_kinds) & set(c.settled_in_step)))
        batch = [Pending(c, groups) for c in settled_last if not c.isolated(self.settings.impl)]
        alone = [Pending(c, groups) for c in cases if c.isolated(self.settings.impl)]
        if batch:
            self._run_pending(batch, world, tp)
        for item in alone:
            self._run_pending([item], world, tp)

    def _groups(self, world: int, tp: int) -> list[int | None]:
        """The TP groups of a job that hold this node's ranks (None when one group spans the world)."""
        return self.settings.rendezvous.local_groups(world, tp)

    def _run_pending(self, pending: list[Pending], world: int, tp: int) -> None:
        """Run jobs until every case has a verdict in every group (each job settles or judges at least one), or
        ``settings.stop`` is set (the cases left have no verdict: validate -x names them)."""
        while pending and not (self.settings.stop is not None and self.settings.stop.is_set()):
            pending = self._run_job(pending, world, tp)

    # -- one job

    def _case_budget(self, case: Case) -> float:
        """The seconds a case may take once it has started."""
        return case_budget(case, self.settings.per_launch_s, self.settings.case_allowance_s)

    def _write_job(self, pending: list[Pending], world: int, tp: int) -> Path:
        """Write the job file for ``pending`` and return its path."""
        s = self.settings
        path = s.run_dir / "jobs" / f"job{self.job_index}{s.rendezvous.node_suffix}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        longest = max(self._case_budget(p.case) for p in pending)
        everywhere = set(self._groups(world, tp))
        specs = []
        for p in pending:
            spec = {"family": p.case.family, "name": p.case.name, "path": p.case.path}
            if set(p.groups) != everywhere:
                spec["groups"] = list(p.groups)  # run again only where another group's fault cut it short
            specs.append(spec)
        doc = {"job": self.job_index, "run_dir": str(s.run_dir), "impl": s.impl, "backend": s.backend, "tp": tp,
               "store": s.store,
               "cache_dir": str(s.cache_dir or s.run_dir / "refcache"),
               "first_rank": s.rendezvous.first_rank(world),
               "collective_timeout_s": longest + s.startup_s, "cases": specs}
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return path

    def _group_runs(self, pending: list[Pending], world: int, tp: int) -> list[GroupRun]:
        """One GroupRun per TP group of this node that has a case in ``pending``."""
        local = self.settings.rendezvous.local_ranks(world)
        runs = []
        for g in self._groups(world, tp):
            cases = [p.case for p in pending if g in p.groups]
            if cases:
                members = tuple(group_ranks(world, tp, g))
                runs.append(GroupRun(g, members, tuple(r for r in members if r in local), cases, tp, world))
        return runs

    def _job_env(self, world: int) -> dict:
        """The environment of one job's process tree."""
        return job_env(self.settings, world)

    def _start_job(self, pending: list[Pending], world: int, tp: int) -> tuple[list[GroupRun], list[str], Path]:
        """Number the next job, clear its ranks' old files and write its job file; its group runs, argv and log."""
        s = self.settings
        self.job_index = next(self.job_numbers)
        runs = self._group_runs(pending, world, tp)
        for run in runs:
            records.clear_rank_files(s.run_dir, run.cases, tp, [run.group], run.ranks)
        job_path = self._write_job(pending, world, tp)
        argv = self.argv_for(s, job_path, world, self.job_index)
        log_path = job_log(s, self.job_index)
        self.job_started_wall = time.time()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.on_note(f"job {self.job_index}: {len(pending)} case(s) at world {world} (tp {tp}) via {s.launcher}; "
                     f"log {log_path}")
        self.job_started_monotonic = time.monotonic()
        self.verdict_times = []
        self.exited, self.stopped = {}, {}  # this job's dead and stopped ranks (global rank -> exit code, pid)
        return runs, argv, log_path

    def _job_clock(self, pending: list[Pending]) -> JobClock:
        """The new job's clock (its startup allowance counts from when the other nodes can join)."""
        s = self.settings
        budgets = sum(self._case_budget(p.case) for p in pending)
        return JobClock(job_started=max(self.job_started_monotonic, self.job_numbers.others_free_at),
                        budgets=budgets, cap=s.startup_s + budgets + s.case_allowance_s, startup_s=s.startup_s,
                        agent_shutdown_s=s.agent_shutdown_s)

    def _hold_job_store(self) -> tuple[NodesDone | None, Any]:
        """With several nodes: the job's done-counter, and the job's store when this harness serves it."""
        rdzv = self.settings.rendezvous
        if not (rdzv.nnodes > 1 and rdzv.endpoint):
            return None, None
        endpoint, job_id = rdzv.job_endpoint(self.job_index), rdzv.job_id(self.job_index)
        # this harness, not its agent, serves the job's store when it is this machine's to serve
        held = self.job_numbers.stores.hold(endpoint, job_id, rdzv.nnodes)
        return NodesDone(endpoint, job_id, rdzv.nnodes), held

    def _run_job(self, pending: list[Pending], world: int, tp: int) -> list[Pending]:
        """Run one job over ``pending``; report each group's verdicts as they settle; return what is still to run."""
        s = self.settings
        runs, argv, log_path = self._start_job(pending, world, tp)
        clock = self._job_clock(pending)
        nodes_done, held = self._hold_job_store()
        env = self._job_env(world)
        sup = s.standby.take(argv, env, log_path) if s.standby is not None else None
        if sup is None:
            with open(log_path, "ab") as log:
                sup = Supervised(argv, env=env, cwd=str(REPO_ROOT), stdout=log, stderr=log, grace_s=s.grace_s,
                                 stacks_dir=stacks_dir(s.run_dir))
        watch = _JobWatch(self, runs, world, tp, clock, nodes_done, agent_alone=lambda: only_the_agent_left(sup))
        outcome = sup.wait(clock.cap + REFERENCE_ALLOWANCE_S, poll=watch.expired,
                           on_expiry=lambda: self._note_stopped(runs))
        if outcome.returncode not in (0, None) and not outcome.timed_out and s.launcher != "virtual":
            self.exited = first_failure(log_path, s.rendezvous.local_ranks(world).start)
        if outcome.leftovers:
            self.on_note(f"job {self.job_index}: processes still alive after ending the job: {outcome.leftovers}")
        watch.settle_completed()
        if nodes_done is not None:
            self._leave_job_store(outcome, clock, nodes_done, held, passed_barrier=watch.stuck)
        if watch.stuck:
            self._report_stuck_shutdown(log_path, sup, world)
        elif outcome.timed_out and all(run.current is None for run in runs):
            self.on_note(f"job {self.job_index}: every case here settled; this node's torchrun agent waited in "
                         f"torchrun's exit barrier for an agent that never reaches it (another node's agent "
                         f"missed it, or their cases' time was up), and was ended")
        still = self._after_job(pending, runs, outcome, world, tp)
        self._write_timing(outcome, world, tp, sup.spare)
        return still

    def _leave_job_store(self, outcome, clock: JobClock, nodes_done: NodesDone, held: Any, *,
                         passed_barrier: bool = False) -> None:
        """Say whether this node's agent missed torchrun's exit barrier, that the node is done with the job's store
        and its agent is gone, and when the other nodes can start the next job."""
        left_by_itself = outcome.returncode == 0 and not outcome.timed_out
        if not (left_by_itself or passed_barrier):
            # before mark(): a node that reads every node done then reads this too, and ends its waiting agent
            nodes_done.mark_missed()
        nodes_done.mark()  # this node needs nothing more from the job's store
        nodes_done.mark_exited()  # called once the agent's tree ended (Supervised.wait): it uses the store no more
        # ended by itself, every agent passed torchrun's exit barrier: the other nodes are done with the job
        together = left_by_itself or clock.all_done_at is not None
        self.job_numbers.others_free_at = time.monotonic() if together else clock.others_done_by()
        if held is not None:
            # every node's agent has left the barrier or its shutdown by then; ending it takes up to grace_s
            held.deadline = clock.agents_gone_by() + self.settings.grace_s
        self.job_numbers.stores.release_finished()

    def _report_stuck_shutdown(self, log_path: Path, tree: Supervised, world: int) -> None:
        """Say in the job's log, a note and an error verdict that this node's agent, past the exit barrier, did not
        finish its rendezvous shutdown within ``agent_shutdown_s`` and was ended."""
        s = self.settings
        pid = tree.proc.pid if tree.proc is not None else None
        line = (f"rankcheck: stuck agent shutdown: torchrun agent {pid} of job {self.job_index} had not left "
                f"{s.agent_shutdown_s:g} s after every node was done and its workers had exited; it was ended")
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(line + "\n")
        self.on_note(f"job {self.job_index}: {line}")
        self.on_result(stuck_shutdown_result(s, self.job_index, world, line))

    def _after_job(self, pending: list[Pending], runs: list[GroupRun], outcome, world: int,
                   tp: int) -> list[Pending]:
        """Judge the groups whose own fault (or deadline) ended the job; return the cases to run again.

        A group whose time ran out, or whose ranks failed (an error, a crash,
        a rank behind or disagreeing), is judged on its case; so is every
        group when none can be told at fault. A group whose case was cut
        short by another group's fault runs it again, once, in a fresh job
        (only the groups that lost it run it); so do the cases a group had
        not begun, and the cases after one whose ranks gave the job up. With
        several nodes nothing runs again (every node must start the same
        jobs, in the same order): those cases are reported as not run."""
        s = self.settings
        live = [run for run in runs if run.current is not None]
        if not live:
            return []
        if outcome.returncode == 0 and not outcome.timed_out:
            # every rank exited by itself: judge what this node can see (other nodes' ranks write elsewhere)
            for run in live:
                for case in run.rest:
                    results = run.results(s.run_dir, case)
                    self._report(case, run, results, records.CaseEnd(bool(results), False, 0),
                                 _ranks_time({run.group: results}))
            return []
        if outcome.timed_out:
            culprits = [run for run in live if run.expired]
        else:
            culprits = [run for run in live if run.abandoned or self._failed_itself(run)]
        culprits = culprits or live
        blamed = ", ".join(self._group_name(run) for run in culprits)
        end = records.CaseEnd(completed=False, timed_out=outcome.timed_out, returncode=outcome.returncode,
                              gpu_processes=gpu_neighbours.summary(outcome.gpu_processes))
        again: dict[str, list] = {}

        def run_again(run: GroupRun, cases: list[Case], why: str) -> None:
            """Queue ``cases`` to run again in ``run``'s group (with several nodes: report them as not run)."""
            for case in cases:
                if s.rendezvous.nnodes > 1:
                    self.on_result(self._not_run(case, tp, run.group, why))
                else:
                    again.setdefault(case.key, [case]).append(run.group)

        for run in live:
            case, later = run.current, run.rest[1:]
            if run.abandoned:
                # its ranks gave the job up after the case just settled: the next one did not run to its end
                run_again(run, run.rest, f"the job ended when {self._group_name(run)} gave it up")
                continue
            began = run.has_begun(s.run_dir)
            key = (case.key, run.group)
            if run in culprits or (began and self.cut_short.get(key, 0) >= 1):
                # the group's own fault, or cut short a second time: judged as it stands
                started = run.started if run.started is not None else self.job_started_monotonic
                self._report(case, run, run.results(s.run_dir), end,
                             time.monotonic() - started, cut_by="" if run in culprits else blamed)
                run_again(run, later, f"the job ended when {blamed} failed, before this case began")
                continue
            if began:
                self.cut_short[key] = self.cut_short.get(key, 0) + 1
                self.on_note(f"job {self.job_index}: {case.key} in {self._group_name(run)} was cut short when "
                             f"{blamed} failed; it runs again")
            run_again(run, run.rest, f"cut short when {blamed} failed")
        # in job order, so that every group keeps its cases' order
        order = [p.case.key for p in pending]
        return [Pending(again[k][0], tuple(again[k][1:])) for k in order if k in again]

    def _failed_itself(self, run: GroupRun) -> bool:
        """Whether the group's own ranks ended its case: an error result, a rank that died or stopped, or a rank
        the records blame."""
        s = self.settings
        if any(r.failed for r in run.results(s.run_dir).values()):
            return True
        progress = records.read_group_progress(s.run_dir, run.case_id())
        return diagnose(progress, **self._deaths_in(run)).rank is not None

    def _note_stopped(self, runs: list[GroupRun]) -> None:
        """Remember the ranks of the live groups whose process is stopped now (called as their time runs out)."""
        for run in runs:
            if run.current is not None:
                progress = records.read_group_progress(self.settings.run_dir, run.case_id())
                self.stopped.update({run.members[g]: pid for g, pid in stopped_ranks(progress).items()})

    def _deaths_in(self, run: GroupRun) -> dict:
        """This job's dead and stopped ranks of ``run``'s group, by group rank: ``diagnose``'s exited and stopped."""
        return {"exited": {g: self.exited[r] for g, r in enumerate(run.members) if r in self.exited},
                "stopped": {g: self.stopped[r] for g, r in enumerate(run.members) if r in self.stopped}}

    def _group_name(self, run: GroupRun) -> str:
        """The group in words, as the notes and verdicts name it (``TP group 5 (ranks 20-23)``)."""
        if run.group is None:
            return "the job's ranks"
        return f"TP group {run.group} (ranks {run.members[0]}-{run.members[-1]})"

    def _not_run(self, case: Case, tp: int, group: int | None, why: str) -> CaseResult:
        """The verdict of a case that never ran in ``group`` and cannot run again (several nodes)."""
        return CaseResult(case.family, case.name, tp, self.settings.launcher, "error", expected=case.expected_text,
                          group=group, impl=self.settings.impl,
                          detail=f"not run: {why}; with several nodes a job is never run again (every node "
                                 f"must start the same jobs in the same order)")

    def _report(self, case: Case, run: GroupRun, results: dict[int, RankResult], end: records.CaseEnd,
                time_s: float, cut_by: str = "") -> None:
        """Judge one group's case and hand the verdict (and its stored-bits check) to the report."""
        s = self.settings
        case_id = run.case_id(case)
        flight_evidence.keep(case_id.directory(s.run_dir))
        diagnosis = None
        if not end.completed or any(r.failed for r in results.values()):
            progress = records.read_group_progress(s.run_dir, case_id)
            diagnosis = diagnose(progress, **self._deaths_in(run),
                                 kernel_records=kernel_diag_records(case_id.directory(s.run_dir)),
                                 stacks=rank_stacks(progress, stacks_dir(s.run_dir)),
                                 stack_files=rank_stack_files(progress, stacks_dir(s.run_dir)),
                                 logs=self._rank_logs(case_id),
                                 nccl_dumps=nccl_dumps(s.env, self.job_started_wall),
                                 gpu_processes=end.gpu_processes).in_group(run.group, run.members)
            flight_evidence.attach(diagnosis, case_id.directory(s.run_dir))
            if cut_by:
                diagnosis.text = f"cut short when {cut_by} failed; {diagnosis.text}"
        stored = results[0].store if 0 in results else None
        if stored:
            self.on_result(store_result(case, case_id.tp, stored))
        verdict = judge(case.in_group(run.group), world=case_id.tp, launcher=s.launcher, impl=s.impl, group=run.group,
                        results=results, end=end, diagnosis=diagnosis, time_s=time_s)
        self.verdict_times.append({"case": case.key, "group": run.group, "status": verdict.status, "at": time.time(),
                                   "expired": run.expired})
        self.on_result(verdict)

    def _write_timing(self, outcome, world: int, tp: int, spare: str | None) -> None:
        """Write the job's timeline beside its job file: start, its process (a spare?), end, how it ended and
        where the end went, when each verdict was given and how long its process took to end after the last."""
        s = self.settings
        ended = time.time()
        last = max((v["at"] for v in self.verdict_times), default=None)
        # a job judged from its records after its end gave its verdicts at the end: nothing after them
        after = round(max(0.0, ended - last), 3) if last is not None else None
        self.after_verdicts_s += after or 0.0
        doc = {"job": self.job_index, "node": s.rendezvous.node_rank, "world": world, "tp": tp,
               "started": self.job_started_wall, "spare": spare, "ended": ended,
               "returncode": outcome.returncode, "timed_out": outcome.timed_out, "ending": outcome.ending,
               "after_last_verdict_s": after, "verdicts": self.verdict_times}
        path = job_timing_path(s, self.job_index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")

    def _rank_logs(self, case: CaseId) -> dict[int, Path]:
        """Each group rank's log in the current job: torchrun's per-rank ``stderr.log`` (this node's ranks), or the virtual job's log."""
        s = self.settings
        ranks = case.ranks()
        if s.launcher == "virtual":
            return {g_rank: job_log(s, self.job_index) for g_rank in range(len(ranks))}
        local = s.rendezvous.local_ranks(case.world)
        logs = {}
        for g_rank, rank in enumerate(ranks):
            path = torchrun_rank_log(job_log_dir(s, self.job_index), rank - local.start) if rank in local else None
            if path is not None:
                logs[g_rank] = path
        return logs


def job_env(s: JobSettings, world: int) -> dict:
    """The environment of one job's process tree at ``world``."""
    env = dict(os.environ)
    env.update(s.env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[HARNESS_VAR] = this_process()  # the ranks end themselves once this process is gone
    # The golden references run on the CPU: share its cores among this node's processes
    # (one for the virtual launcher, one per rank otherwise).
    processes = 1 if s.launcher == "virtual" else len(s.rendezvous.local_ranks(world))
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    return env


class _JobWatch:
    """A job while it runs: settles each group's finished cases and says when a group's (or the job's) time is up."""

    def __init__(self, runner: JobRunner, runs: list[GroupRun], world: int, tp: int, clock: JobClock,
                 nodes_done: NodesDone | None, agent_alone: Callable[[], bool] = lambda: False) -> None:
        self.runner, self.runs, self.world, self.tp = runner, runs, world, tp
        self.clock, self.nodes_done = clock, nodes_done
        self.agent_alone = agent_alone  # whether the agent's workers have all exited (only it is left in its tree)
        self.stuck = False  # the agent was ended in its shutdown, past the exit barrier

    def settle_completed(self) -> None:
        """Judge and report, group by group, every leading case whose ranks on this node have all written results."""
        runner, run_dir = self.runner, self.runner.settings.run_dir
        now = time.monotonic()
        for run in self.runs:
            while run.current is not None and run.complete(run_dir):
                results = run.results(run_dir)
                started = run.started if run.started is not None else runner.job_started_monotonic
                self.clock.case_began(run.started if run.started is not None else now)
                runner._report(run.current, run, results, records.CaseEnd(True), now - started)
                run.abandoned = any(r.abandon for r in results.values())
                run.advance(now)

    def expired(self) -> bool:
        """Settle finished cases; True when a group's case has run out of time (or every case is settled and
        the agent has waited for the other nodes' agents as long as any of them may still run)."""
        s, clock = self.runner.settings, self.clock
        self.settle_completed()
        now = time.monotonic()
        since_poll = clock.poll(now)
        live = [run for run in self.runs if run.current is not None]
        if not live:
            return self.agent_may_go(now)
        referencing = False
        for run in live:
            why, on_reference = run.time_up(s.run_dir, now=now, since_poll=since_poll,
                                            job_started=clock.job_started, startup_s=s.startup_s,
                                            per_launch_s=s.per_launch_s, case_allowance_s=s.case_allowance_s)
            referencing = referencing or on_reference
            if run.started is not None:
                clock.case_began(run.started)
            run.expired = run.expired or why
        if referencing:
            clock.paused += since_poll
        if clock.out_of_budget(now):
            for run in live:
                run.expired = run.expired or f"the job's {clock.cap:g} s budget ran out"
        return any(run.expired for run in live)

    def agent_may_go(self, now: float) -> bool:
        """With every case here settled: whether this node's torchrun agent may be ended.

        It waits (up to 300 s) in torchrun's exit barrier for every other
        node's agent, and leaves by itself only once all have reached it: so
        it is ended as soon as some node's agent has missed the barrier, or
        once no node's case may run any longer. Once every node is done and
        none missed, it passes the barrier and shuts its rendezvous down by
        itself: it is ended only when that has taken ``agent_shutdown_s``
        since its workers all exited (``stuck``)."""
        clock, nodes_done = self.clock, self.nodes_done
        if nodes_done is None:
            return now > clock.others_done_by()
        nodes_done.mark()
        # done before missed: a node says it missed before it says it is done (NodesDone.mark_missed)
        if clock.all_done_at is None and nodes_done.all_done():
            clock.all_done_at = now
        if nodes_done.any_missed():
            return True  # read every poll: a node that said done may still miss the barrier (its agent failed)
        if clock.all_done_at is None:
            return now > clock.others_done_by()
        if clock.agent_alone_at is None and self.agent_alone():
            clock.agent_alone_at = now
        self.stuck = now > clock.shutdown_deadline()
        return self.stuck


def only_the_agent_left(tree: Supervised) -> bool:
    """Whether the only live process of the job's tree is the one it started (the agent: its workers have exited)."""
    if tree.proc is None:
        return False
    return set(processes_with_token(tree.token)) <= {tree.proc.pid}


def stuck_shutdown_result(settings: JobSettings, job_index: int, world: int, detail: str) -> CaseResult:
    """The error verdict of a job whose agent was ended in its rendezvous shutdown (``family`` ``job``, like
    ``harness.reports.merge``'s own node errors: a node's, never planned on the others)."""
    node = settings.rendezvous.node_rank
    return CaseResult("job", f"node{node}:job{job_index}:agent-shutdown", world, settings.launcher, "error",
                      expected="the torchrun agent leaves by itself once every node is done", detail=detail,
                      impl=settings.impl)


def job_log_dir(settings: JobSettings, job_index: int) -> Path:
    """The directory of one job's per-rank logs (torchrun's ``--log-dir``)."""
    return settings.run_dir / "logs" / f"job{job_index}{settings.rendezvous.node_suffix}"


def job_timing_path(settings: JobSettings, job_index: int) -> Path:
    """The timeline file of one job (``JobRunner._write_timing``)."""
    return settings.run_dir / "timing" / f"job{job_index}{settings.rendezvous.node_suffix}.json"


def job_log(settings: JobSettings, job_index: int) -> Path:
    """The log of one job's process tree (the torchrun agent's output, or the virtual process's)."""
    directory = job_log_dir(settings, job_index)
    return directory.with_name(directory.name + ".log")


def _ranks_time(results: dict) -> float:
    """The longest time a rank of a case measured for itself (seconds; 0.0 when no rank reported one)."""
    return max((float(r.time_s) for group in results.values() for r in group.values()), default=0.0)


def store_result(case: Case, tp: int, stored: dict) -> CaseResult:
    """The verdict of the stored-golden-bits check of one case (rank 0's reference outputs)."""
    status = {"ok": "pass", "recorded": "pass", "missing": "not-available"}.get(stored["status"], "fail")
    return CaseResult(case.family, f"{case.name}:stored-bits", tp, "store", status, expected="stored digests",
                      detail=f"{stored['status']}: {stored['message']}", impl="golden")


def python() -> str:
    """The interpreter running the harness (the workers use the same one)."""
    return sys.executable
