"""Running cases as jobs: batching, the per-case deadline, and recovery after a job ends early.

Starting torchrun costs seconds (interpreters, torch import, rendezvous),
so cases that cannot hang or kill their ranks run many to a job; a case that
may (an injected hang, crash, skipped or repeated launch, disagreeing ranks,
an expected timeout) runs in a job of its own. A job is one supervised
process tree (``harness.watchdog.Supervised``) running ``harness.worker``
over a job file; its cases run in order.

While the job runs, the loop polls the run directory: a case whose ranks
have all written their results is judged and reported at once. The case in
progress has its own clock: the startup allowance until its first progress
record appears (for the first case of a job), then the per-launch deadline
times its launches plus a per-case allowance (input building and the
reference). Time a rank spends on the unsharded reference (its last record
is ``reference`` and its heartbeat is fresh: a realistic-size golden
reference takes minutes on a CPU) stops that clock. When it expires the
watchdog asks the workers for their Python stacks and ends the whole tree;
the case is judged from the records (a timeout naming the rank and launch,
with each rank's innermost frames and log: ``harness.evidence``), and the
cases after it run in a fresh job. A job that ends early (a crash, or a rank that abandoned the job after
an unexpected error) is handled the same way, without waiting; a case that
had not started when its job ended is run again in the fresh job, not
judged (it never ran), provided the ended job settled at least one case.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from harness.evidence import nccl_dumps, rank_stacks, stacks_dir, torchrun_rank_log
from harness.families.catalog import Case
from harness.launchers import records
from harness.launchers.verdict import judge
from harness.report import CaseResult
from harness.watchdog import Supervised, diagnose, kernel_diag_records
from harness.worker import case_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
# A reference heartbeat older than this no longer stops the case clock (the worker beats every 5 s).
HEARTBEAT_STALE_S = 30.0
# The most a job may run beyond its budget on reference computations (the backstop of every job).
REFERENCE_ALLOWANCE_S = 3600.0


@dataclass(frozen=True)
class Rendezvous:
    """torchrun's node options, passed through unchanged (defaults: one standalone node)."""

    nnodes: int = 1
    node_rank: int = 0
    backend: str | None = None
    endpoint: str | None = None
    id: str | None = None
    nproc_per_node: int | None = None

    def local_ranks(self, world: int) -> range:
        """The global ranks this node runs (all of them on one node)."""
        if self.nnodes == 1:
            return range(world)
        per_node = self.nproc_per_node or world // self.nnodes
        return range(self.node_rank * per_node, (self.node_rank + 1) * per_node)

    @property
    def node_suffix(self) -> str:
        """``.node<rank>`` for a node of a multi-node run (its files must not collide with the others'), else ``""``."""
        return f".node{self.node_rank}" if self.nnodes > 1 else ""

    @property
    def world(self) -> int | None:
        """The job's rank count the node options imply (``nnodes * nproc_per_node``), or None without ``--nproc-per-node``."""
        return self.nnodes * self.nproc_per_node if self.nproc_per_node else None

    def node_path(self, path: str | os.PathLike) -> str:
        """``path`` with ``node_suffix`` before its extension (``X.xml`` -> ``X.node3.xml``); unchanged on one node."""
        target = Path(path)
        return str(target.with_name(f"{target.stem}{self.node_suffix}{target.suffix}"))

    def first_rank(self, world: int) -> int | None:
        """The global rank this node's local rank 0 must take, with several nodes (None on one node).

        torchrun's c10d rendezvous ignores ``--node-rank`` and orders the
        agents its own way (by host name, then agent pid, anew for every
        job), while the harness names files, TP groups and logs after node
        ``k`` holding ranks ``local_ranks``; so the workers number themselves
        from this (``harness.worker``). The store the workers meet in is the
        agent's, so no rank's number decides who serves it."""
        return self.local_ranks(world).start if self.nnodes > 1 else None

    def describe(self) -> dict:
        """This node in the job, as a report's provenance records it (what ``harness merge-reports`` checks)."""
        return {"rank": self.node_rank, "nnodes": self.nnodes, "nproc_per_node": self.nproc_per_node,
                "rdzv_id": self.id, "rdzv_endpoint": self.endpoint}

    def local_groups(self, world: int, tp: int) -> list[int | None]:
        """The TP groups holding at least one of this node's ranks (``[None]`` when one group spans the world).

        A node reports only these: the other groups' ranks ran elsewhere, and
        judging them from the results this node cannot see would call a case
        that ran nowhere here a pass."""
        if tp >= world:
            return [None]
        ranks = self.local_ranks(world)
        return [g for g in range(world // tp) if g * tp < ranks.stop and ranks.start < (g + 1) * tp]


@dataclass
class JobSettings:
    """Everything a launcher needs to run jobs (from the CLI)."""

    launcher: str
    impl: str
    backend: str
    run_dir: Path
    per_launch_s: float | None = None
    startup_s: float = 90.0
    case_allowance_s: float = 20.0
    grace_s: float = 3.0
    tp: int | None = None
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    store: str | None = None
    env: dict = field(default_factory=dict)
    # The reference cache the ranks share (harness.refcache); None: the run's own <run>/refcache.
    cache_dir: Path | None = None


ArgvBuilder = Callable[[JobSettings, Path, int, int], list[str]]


class JobRunner:
    """Runs cases at one world size through a launcher's argv builder, reporting each verdict."""

    def __init__(self, settings: JobSettings, argv_for: ArgvBuilder, on_result: Callable[[CaseResult], None],
                 on_note: Callable[[str], None] = lambda text: None, job_numbers: Iterator[int] | None = None) -> None:
        self.settings = settings
        self.argv_for = argv_for
        self.on_result = on_result
        self.on_note = on_note
        self.job_numbers = job_numbers if job_numbers is not None else itertools.count()
        self.job_index = 0
        self.job_started_wall = time.time()

    # -- scheduling

    def run(self, cases: Sequence[Case], world: int) -> None:
        """Run every case at ``world`` ranks (TP size ``settings.tp`` or ``world``): batched, then isolated."""
        tp = self.settings.tp or world
        if world % tp:
            raise ValueError(f"--tp {tp} must divide the world size {world}")
        batch = [c for c in cases if not c.isolated(self.settings.impl)]
        alone = [c for c in cases if c.isolated(self.settings.impl)]
        if batch:
            self._run_pending(batch, world, tp)
        for case in alone:
            self._run_pending([case], world, tp)

    def _groups(self, world: int, tp: int) -> list[int | None]:
        """The TP groups of a job that hold this node's ranks (None when one group spans the world)."""
        return self.settings.rendezvous.local_groups(world, tp)

    def _run_pending(self, cases: list[Case], world: int, tp: int) -> None:
        """Run jobs until every case has a verdict (each job settles at least its first pending case)."""
        pending = list(cases)
        while pending:
            pending = self._run_job(pending, world, tp)

    # -- one job

    def _case_budget(self, case: Case) -> float:
        """The seconds a case may take once it has started."""
        return case.per_launch_s(self.settings.per_launch_s) * max(case.launches, 1) + self.settings.case_allowance_s

    def _write_job(self, cases: list[Case], world: int, tp: int) -> Path:
        """Write the job file for ``cases`` and return its path."""
        s = self.settings
        path = s.run_dir / "jobs" / f"job{self.job_index}{s.rendezvous.node_suffix}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        longest = max(self._case_budget(c) for c in cases)
        doc = {"run_dir": str(s.run_dir), "impl": s.impl, "backend": s.backend, "tp": tp, "store": s.store,
               "cache_dir": str(s.cache_dir or s.run_dir / "refcache"),
               "first_rank": s.rendezvous.first_rank(world),
               "collective_timeout_s": longest + s.startup_s,
               "cases": [{"family": c.family, "name": c.name, "path": c.path} for c in cases]}
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return path

    def _run_job(self, pending: list[Case], world: int, tp: int) -> list[Case]:
        """Run one job over ``pending``; report verdicts; return the cases still to run."""
        s = self.settings
        self.job_index = next(self.job_numbers)
        groups = self._groups(world, tp)
        records.clear_rank_files(s.run_dir, pending, tp, groups, s.rendezvous.local_ranks(world))
        job_path = self._write_job(pending, world, tp)
        argv = self.argv_for(s, job_path, world, self.job_index)
        log_path = job_log(s, self.job_index)
        self.job_started_wall = time.time()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.on_note(f"job {self.job_index}: {len(pending)} case(s) at world {world} (tp {tp}) via {s.launcher}; "
                     f"log {log_path}")
        env = dict(os.environ)
        env.update(s.env)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
        env.setdefault("PYTHONUNBUFFERED", "1")
        # The golden references run on the CPU: share its cores among this node's processes
        # (one for the virtual launcher, one per rank otherwise).
        processes = 1 if s.launcher == "virtual" else len(s.rendezvous.local_ranks(world))
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
        remaining = list(pending)
        clock = {"case_started": None, "job_started": time.monotonic(), "last_poll": time.monotonic(),
                 "paused": 0.0, "case_paused": 0.0, "settled": 0, "abandoned": False}
        # results this harness can see: every rank's on one node; with several nodes the run
        # directories need not be shared, so this node's ranks (more when the directory is shared)
        rdzv = s.rendezvous
        visible = world if rdzv.nnodes == 1 else (rdzv.nproc_per_node or world // rdzv.nnodes)

        def settle_completed() -> None:
            """Judge and report every leading case whose ranks have all written results."""
            while remaining:
                case = remaining[0]
                results = {g: records.read_results(s.run_dir, case.family, case.name, tp, g, world) for g in groups}
                if sum(len(r) for r in results.values()) < visible:
                    return
                started = clock["case_started"] or clock["job_started"]
                self._report(case, world, tp, groups, results, records.CaseEnd(True), time.monotonic() - started)
                remaining.pop(0)
                clock["case_started"] = time.monotonic()
                clock["case_paused"] = 0.0
                clock["settled"] += 1
                clock["abandoned"] = any(r.get("abandon") for rs in results.values() for r in rs.values())

        def expired() -> bool:
            """Settle finished cases; True when the case in progress has run out of time."""
            settle_completed()
            if not remaining:
                return False
            case = remaining[0]
            now = time.monotonic()
            since_poll, clock["last_poll"] = now - clock["last_poll"], now
            if clock["case_started"] is None:
                if not records.case_started(s.run_dir, case.family, case.name, tp, groups):
                    return now - clock["job_started"] > s.startup_s
                clock["case_started"] = now
            act = records.latest_activity(s.run_dir, case.family, case.name, tp, groups)
            if act.referencing and act.newest is not None and time.time() - act.newest < HEARTBEAT_STALE_S:
                clock["case_paused"] += since_poll  # a reference is being computed: not the case's time
                clock["paused"] += since_poll
                return False
            if (now - clock["case_started"] - clock["case_paused"] > self._case_budget(case)
                    or now - clock["job_started"] - clock["paused"] > cap):
                return True
            stall = case.per_launch_s(s.per_launch_s) + (0.0 if act.begun else s.case_allowance_s)
            return act.newest is not None and time.time() - act.newest > stall

        cap = s.startup_s + sum(self._case_budget(c) for c in pending) + s.case_allowance_s
        with open(log_path, "ab") as log:
            sup = Supervised(argv, env=env, cwd=str(REPO_ROOT), stdout=log, stderr=log, grace_s=s.grace_s,
                             stacks_dir=stacks_dir(s.run_dir))
            outcome = sup.wait(cap + REFERENCE_ALLOWANCE_S, poll=expired)
        if outcome.leftovers:
            self.on_note(f"job {self.job_index}: processes still alive after ending the job: {outcome.leftovers}")
        settle_completed()
        if not remaining:
            return []
        if not outcome.timed_out and (clock["abandoned"] or (
                clock["settled"] and not records.case_started(s.run_dir, remaining[0].family, remaining[0].name,
                                                              tp, groups))):
            # The job ended between cases (its ranks abandoned it after an unexpected error in the
            # case just settled): the next case did not run to its end; run it afresh in a new job.
            for g in groups:
                shutil.rmtree(case_dir(s.run_dir, remaining[0].family, remaining[0].name, tp, g), ignore_errors=True)
            return remaining
        # The job ended (or was ended) with cases unsettled: the first one was running.
        case = remaining.pop(0)
        results = {g: records.read_results(s.run_dir, case.family, case.name, tp, g, world) for g in groups}
        clean_exit = outcome.returncode == 0 and not outcome.timed_out
        end = records.CaseEnd(completed=clean_exit and any(results.values()), timed_out=outcome.timed_out,
                              returncode=outcome.returncode)
        started = clock["case_started"] or clock["job_started"]
        self._report(case, world, tp, groups, results, end, time.monotonic() - started)
        if clean_exit:
            # Ranks of other nodes write elsewhere: judge what this node can see.
            while remaining:
                nxt = remaining.pop(0)
                res = {g: records.read_results(s.run_dir, nxt.family, nxt.name, tp, g, world) for g in groups}
                self._report(nxt, world, tp, groups, res, records.CaseEnd(any(res.values()), False, 0),
                             _ranks_time(res))
        return remaining

    def _report(self, case: Case, world: int, tp: int, groups: list[int | None], results: dict,
                end: records.CaseEnd, time_s: float) -> None:
        """Judge each group of a case and hand the verdicts to the report."""
        for g in groups:
            diagnosis = None
            if not end.completed or any(r.get("status") == "error" for r in results[g].values()):
                progress = records.read_group_progress(self.settings.run_dir, case.family, case.name, tp, g, world)
                directory = case_dir(self.settings.run_dir, case.family, case.name, tp, g)
                diagnosis = diagnose(progress, kernel_records=kernel_diag_records(directory),
                                     stacks=rank_stacks(progress, stacks_dir(self.settings.run_dir)),
                                     logs=self._rank_logs(world, tp, g),
                                     nccl_dumps=nccl_dumps(self.settings.env, self.job_started_wall))
            stored = (results[g].get(0) or {}).get("store")
            if stored:
                self.on_result(store_result(case, tp, stored))
            self.on_result(judge(case, world=tp, launcher=self.settings.launcher, impl=self.settings.impl,
                                 group=g, results=results[g], end=end, diagnosis=diagnosis, time_s=time_s))


    def _rank_logs(self, world: int, tp: int, group: int | None) -> dict[int, Path]:
        """Each group rank's log in the current job: torchrun's per-rank ``stderr.log`` (this node's ranks), or the virtual job's log."""
        s = self.settings
        ranks = records.group_ranks(world, tp, group)
        if s.launcher == "virtual":
            return {g_rank: job_log(s, self.job_index) for g_rank in range(len(ranks))}
        local = s.rendezvous.local_ranks(world)
        logs = {}
        for g_rank, rank in enumerate(ranks):
            path = torchrun_rank_log(job_log_dir(s, self.job_index), rank - local.start) if rank in local else None
            if path is not None:
                logs[g_rank] = path
        return logs


def job_log_dir(settings: JobSettings, job_index: int) -> Path:
    """The directory of one job's per-rank logs (torchrun's ``--log-dir``)."""
    return settings.run_dir / "logs" / f"job{job_index}{settings.rendezvous.node_suffix}"


def job_log(settings: JobSettings, job_index: int) -> Path:
    """The log of one job's process tree (the torchrun agent's output, or the virtual process's)."""
    directory = job_log_dir(settings, job_index)
    return directory.with_name(directory.name + ".log")


def _ranks_time(results: dict) -> float:
    """The longest time a rank of a case measured for itself (seconds; 0.0 when no rank reported one)."""
    return max((float(r.get("time_s", 0.0)) for group in results.values() for r in group.values()), default=0.0)


def store_result(case: Case, tp: int, stored: dict) -> CaseResult:
    """The verdict of the stored-golden-bits check of one case (rank 0's reference outputs)."""
    status = {"ok": "pass", "recorded": "pass", "missing": "not-available"}.get(stored["status"], "fail")
    return CaseResult(case.family, f"{case.name}:stored-bits", tp, "store", status, expected="stored digests",
                      detail=f"{stored['status']}: {stored['message']}", impl="golden")


def python() -> str:
    """The interpreter running the harness (the workers use the same one)."""
    return sys.executable
