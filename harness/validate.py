"""``harness validate`` (and ``make validate``): every scenario of the machine's size class at every world.

The launcher is resolved first (``auto`` picks from the GPUs present) and
named in the report header, with what needs a GPU when none is here. Then,
for each world size (the scenarios' own ``worlds``, or ``--world``), the
cases that list it run through the launcher's ``JobRunner``: batched into one
job where they cannot hang, alone where they may. With ``--tp T`` every job
has ``world`` ranks split into ``world / T`` TP groups side by side, each
validated on its own (cases run at TP size T).

With torchrun's node options (``--nnodes N --nproc-per-node P``, one agent
per node) the world is N x P unless ``--world`` says the same; ``--tp``
splits it, and scenarios that no planned world or TP size runs are named
in the header (``WorldPlan.skipped``). Each node reports the TP groups that
have ranks on it, into report files with its node rank in the name
(``Rendezvous.node_path``); ``harness merge-reports`` makes one report of
them for the job.

``--inject SCENARIO:KIND:key=value,...`` plants a fault in one scenario of
the selection for this run only (``harness.launch.inject_option``; the nightly's
planted hang: ``<family>/basic:hang:rank=1,launch=1,group=5``), checked
at every world the plan runs it. An injection's ``group`` (in a file or
given here) must be a TP group the run has (``check_fault_groups``).

On the cpu launcher the system under test is the golden per-rank loop over
real processes, compared with the unsharded golden reference. On every
launcher the reference outputs of each golden-outcome case are also checked
against the stored golden bits (``golden/store.py``, variant ``world<tp>``;
``store="record"`` records them instead, for ``harness golden
--regenerate``); each check is one more report line, ``<name>:stored-bits``.
The store holds the cpu-size scenarios only: a gpu-size reference takes
minutes on a CPU, so those are checked by recomputation on the GPU machine,
and the header says once how many were skipped, and why, instead of one
line per case. Scenarios that expect an error
or a timeout pass when they end that way (a timeout must name the right
rank and launch).

Selection, as pytest selects tests: ``--scenario`` takes names and
shell-style patterns (``markov_*/nan*``; ``harness.families.selection``),
``-k EXPR`` keeps the cases whose words (family, name, file name, scenario
root, ``world=N``, launcher, case id) satisfy a pytest keyword expression
(``=`` is not in its grammar: ``--world`` picks worlds), ``--lf``
keeps the cases that failed in the last run's JSON report (the newest
under ``runs/``, or ``--last-report PATH``; ``harness.reports.last_failed``;
a report without failures selects everything, as pytest's ``--lf`` does),
and ``ValidateRequest.only`` keeps exactly the (scenario, world) pairs the
pytest plugin collected (``harness.pytest_plugin``). ``--collect-only``
prints the selected case ids, one a line, and runs nothing: exit 0, or 2
with the reason when nothing is selected (the code a real run of that
selection ends with, never 0). ``-x`` (``--exitfirst``) starts no new job
after the first failing result; the jobs already running finish, the
cases never started are named in a note (``not run after the first
failure``) and counted short in the footer (``Cases : n of m``), and the
run ends FAILED (exit 1).

The exit code is the report's (``Report.verdict``): a selection that plans
no case is not an error to hide but a run that tested nothing, so it still
writes its (empty) JSON and JUnit files and ends with exit 2 and the plan's
reason (``WorldPlan.why_empty``); a scenario file refused before the run
(it does not load) leaves every other scenario running but ends the run
with exit 2 (``INPUT REFUSED``, naming the file, in the JSON summary, the
JUnit properties and the footer) unless a case failed; every case not available is exit 3 unless
``allow_unavailable``; an interrupt anywhere in the run is exit 130 with the
footer ``INTERRUPTED (n of m run)``. The bar's total and the footer count
the same cases (``planned_cases``: one per scenario, world and TP group;
stored-bits checks are not cases).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Collection, Sequence

from harness.wire.case_files import default_run_dir, stored_case
from harness.wire.tp_groups import check_tp, group_count, tp_size
from harness.wire.run_dir import run_dir_lock
from harness.wire.atomic_file import writable_dir
from harness.families.catalog import Case, case_of, discover_each, load, resolve_name, select
from harness.families.selection import KeywordExpression, case_words, expand_globs
from harness.launch.inject_option import checked_injections, split_target, write_injected_copy
from harness.launch.launchers import argv_builder, gpu_count, resolve, settings_for
from harness.wire.worker_evidence import stacks_dir
from harness.launch.jobs import REPO_ROOT, JobRunner, JobSequence, job_env, python
from harness.launch.torchrun_options import Rendezvous
from harness.launch.spares import StandbyPool
from harness.launch.supervision import received_signal
from harness.launch.load_scale import describe as describe_load, load_factor, scaled_defaults
from harness.launch.durations import FILE_NAME as DURATIONS_FILE, UnitDurations
from harness.launch.unit_timeline import UnitTimeline
from harness.launch.schedule import DevicePool, default_lanes, job_units, order_units, run_units
from harness.references.cache import cache_root, kernel_cache_env
from harness.launch.reference_pool import ReferencePool
from harness.references.pool import queue_items
from harness.reports import provenance
from harness.families.arch_facts import describe_choice
from harness.families.systems import substitution
from harness.reports.last_failed import failed_cases, newest_report
from harness.reports.report import Report
from harness.wire.case_result import EXIT_NOTHING_RUN, EXIT_OK, FAILING, case_id


@dataclass
class ValidateRequest:
    """What ``validate`` was asked to run (parsed CLI)."""

    launcher: str = "auto"
    family: str | None = None
    scenarios: Sequence[str] | None = None
    worlds: Sequence[int] | None = None
    size: str | None = None
    tp: int | None = None
    junit: str | None = None
    json: str | None = None
    run_dir: str | None = None
    deadline: float | None = None
    startup: float | None = None  # the job startup allowance; None: harness.launch.load_scale's default, scaled
    scenario_root: str | None = None
    impl: str | None = None
    store: str | None = "check"
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    allow_unavailable: bool = False
    cache: bool = True  # the persistent reference and kernel cache (harness.references.cache); False: --no-cache
    lanes: int | None = None  # job units at once (harness.launch.schedule); None: from the machine
    ref_workers: int | None = None  # reference pool processes (harness.references.pool); None: from the machine
    standby: bool = True  # spare processes for virtual jobs (harness.launch.spares); False: --no-standby
    inject: Sequence[str] = ()  # SCENARIO:KIND:key=value,... (harness.launch.inject_option), this run only
    keyword: str | None = None  # -k EXPR over each case's words (harness.families.selection)
    last_failed: bool = False  # --lf: the cases that failed in the last run's report only
    last_report: str | None = None  # --last-report PATH: the report --lf reads (default: the newest under runs/)
    exitfirst: bool = False  # -x: no new job after the first failing result
    collect_only: bool = False  # --collect-only: print the selected case ids and run nothing
    only: Collection[tuple[str, int]] | None = None  # exactly these (family/name, world) pairs (the pytest plugin)
    load_scale: float | None = None  # the default allowances' factor (harness.launch.load_scale); None: measured


class WorldPlan(list):
    """The (world, cases) pairs to run, plus what the plan left out and why, in words.

    A list, so code that iterates the pairs needs nothing else; ``skipped``
    is the header line naming the scenarios no planned world or TP size
    runs ("" when none), ``why_empty`` says why no case was selected ("" when
    some case runs): the message of the exit-2 verdict."""

    def __init__(self, pairs=(), *, skipped: str = "", why_empty: str = "") -> None:
        super().__init__(pairs)
        self.skipped = skipped
        self.why_empty = why_empty


# A header note names at most this many skipped scenarios (the rest as a count).
SKIPPED_NAMES_SHOWN = 12


def requested_worlds(req: ValidateRequest) -> tuple[list[int], str]:
    """(worlds, where): ``--world``, or torchrun's ``nnodes * nproc_per_node`` (which ``--world`` must then equal).

    ``where`` names the constraint in words for messages ("" when neither was given)."""
    bad = [w for w in req.worlds or [] if w < 1]
    if bad:
        raise ValueError(f"--world must be >= 1, got {bad}")
    worlds = list(req.worlds or [])
    rdzv = req.rendezvous
    if not 0 <= rdzv.node_rank < rdzv.nnodes:
        raise ValueError(f"--node-rank {rdzv.node_rank}: expected 0..{rdzv.nnodes - 1} (--nnodes {rdzv.nnodes})")
    if rdzv.world is None:
        if rdzv.nnodes > 1 and not worlds:
            raise ValueError(f"--nnodes {rdzv.nnodes} needs --nproc-per-node (or --world, the total rank count)")
        return worlds, (f"world {' '.join(map(str, worlds))}" if worlds else "")
    nodes = f"--nnodes {rdzv.nnodes} x --nproc-per-node {rdzv.nproc_per_node}"
    if worlds and worlds != [rdzv.world]:
        raise ValueError(f"--world {' '.join(map(str, worlds))} contradicts {nodes} = {rdzv.world} ranks")
    return [rdzv.world], f"world {rdzv.world} ({nodes})"


def plan_worlds(cases: Sequence[Case], req: ValidateRequest) -> WorldPlan:
    """The (world, cases) pairs to run and what they leave out: each case at every world it lists (those of
    ``--world`` or of the node options only, when given), or with ``--tp T`` every case listing T at that world."""
    check_tp(req.tp)
    worlds, where = requested_worlds(req)
    if req.tp is not None:
        if not worlds:
            raise ValueError("--tp needs --world (the total rank count, a multiple of --tp) "
                             "or torchrun's --nnodes and --nproc-per-node")
        for world in worlds:
            tp_size(req.tp, world, "--world")
        where, option = f"tp {req.tp}, {where}", "--tp"
        pairs = [(world, [c for c in cases if req.tp in c.worlds]) for world in worlds]
    else:
        option = "--world"
        listed = sorted({w for c in cases for w in c.worlds})
        pairs = [(w, [c for c in cases if w in c.worlds]) for w in listed if not worlds or w in worlds]
    running = {c.key for _, world_cases in pairs for c in world_cases}
    left_out = [c for c in cases if c.key not in running]
    if req.scenarios and left_out:
        # scenarios asked for by name must run: skipping them would answer a question nobody asked
        raise ValueError(f"{option}: " + "; ".join(f"{c.key} runs at {list(c.worlds)}" for c in left_out) +
                         f", not at {where}")
    skipped = why_empty = ""
    if left_out:
        names = ", ".join(c.key for c in left_out[:SKIPPED_NAMES_SHOWN])
        more = f" and {len(left_out) - SKIPPED_NAMES_SHOWN} more" if len(left_out) > SKIPPED_NAMES_SHOWN else ""
        skipped = f"skipped {len(left_out)} scenario(s) that do not run at {where}: {names}{more}"
    if not running:
        listed = sorted({w for c in cases for w in c.worlds})
        why_empty = (f"none of the {len(cases)} selected scenario(s) runs at {where} (they run at worlds {listed})"
                     if cases else "no scenario matches the selection")
    return WorldPlan(pairs, skipped=skipped, why_empty=why_empty)


def size_class(requested: str | None, launcher: str, gpus: int) -> str:
    """The size class a run validates: ``requested``, else ``all`` on a GPU launcher with GPUs, else ``cpu``."""
    return requested or ("all" if launcher != "cpu" and gpus else "cpu")


def narrow_plan(pairs: WorldPlan, req: ValidateRequest, launcher: str) -> str:
    """Keep the planned (world, case) pairs that ``-k``, ``--lf`` and ``only`` select; return a header line saying
    what the selection kept ("" when none of them was given). Worlds left without a case are dropped."""
    rules, said = [], []
    if req.keyword:
        expression = KeywordExpression(req.keyword)
        rules.append(lambda case, size: expression.matches(case_words(case, size, launcher)))
        said.append(f"-k {req.keyword!r}")
    if req.last_failed:
        path = Path(req.last_report) if req.last_report else newest_report()
        failed = failed_cases(path)
        if failed:
            rules.append(lambda case, size: (case.key, size) in failed)
            said.append(f"--lf: the {len(failed)} failed case(s) of {path}")
        else:
            said.append(f"--lf: no failed case in {path}, so every case (as pytest's --lf)")
    if req.only is not None:
        only = set(req.only)
        rules.append(lambda case, size: (case.key, size) in only)
        said.append(f"the {len(only)} (scenario, world) pair(s) asked for (pytest's items)")
    if not said:
        return ""
    before = sum(len(cases) for _, cases in pairs)
    kept = [(world, [c for c in cases if all(rule(c, tp_size(req.tp, world)) for rule in rules)]) for world, cases in pairs]
    pairs[:] = [(world, cases) for world, cases in kept if cases]
    after = sum(len(cases) for _, cases in pairs)
    if before and not after:
        pairs.why_empty = f"no planned case matches {'; '.join(said)}"
    return f"selected {after} of {before} planned (scenario, world) pair(s) by {'; '.join(said)}"


def collected_ids(pairs: Sequence[tuple[int, Sequence[Case]]], req: ValidateRequest, launcher: str) -> list[str]:
    """The case id of every case the plan runs, in plan order (one per TP group this node reports)."""
    return [case_id(c.family, c.name, tp_size(req.tp, world), launcher, group)
            for world, cases in pairs for c in cases
            for group in req.rendezvous.local_groups(world, tp_size(req.tp, world))]


def print_collected(pairs: WorldPlan, req: ValidateRequest, launcher: str, selection: str, stream) -> int:
    """``--collect-only``: print the selected case ids and a count; exit 0, or 2 when nothing is selected."""
    ids = collected_ids(pairs, req, launcher)
    for line in ids:
        print(line, file=stream)
    if not ids:
        print(f"# no case selected: {pairs.why_empty or 'no scenario matches the selection'}", file=stream)
        return EXIT_NOTHING_RUN
    print(f"# {len(ids)} case(s) selected" + (f"; {selection}" if selection else ""), file=stream)
    return EXIT_OK


def plant_injections(pairs: WorldPlan, req: ValidateRequest, root: Path) -> list[str]:
    """Replace each scenario ``req.inject`` names by a copy under ``root`` with its injections, checked at every
    planned world; return the header lines saying what was planted where."""
    named: dict[str, tuple[Case, list[str]]] = {}
    planned = list({c.key: c for _, cases in pairs for c in cases}.values())
    for text in req.inject:
        name, injection = split_target(text)
        (case,) = resolve_name(planned, name, option="--inject")
        named.setdefault(case.key, (case, []))[1].append(injection)
    copies, lines = {}, []
    for key, (case, texts) in named.items():
        extra: list[dict] = []
        sizes = []
        for world, cases in pairs:
            if any(c.key == key for c in cases):
                size = tp_size(req.tp, world)
                extra = checked_injections(case, texts, size, groups=group_count(world, size),
                                           where=f"tp {size}, world {world}" if req.tp else f"--world {world}")
                sizes.append(size)
        # the copy runs at the planned TP sizes only: its ranks were checked there, not at the file's other worlds
        copy = write_injected_copy(case, extra, texts, root, worlds=sorted(set(sizes)))
        copies[key] = case_of(load(copy))
        lines.append(f"injected into {key} for this run: {' '.join(texts)} (copy {copy})")
    pairs[:] = [(world, [copies.get(c.key, c) for c in cases]) for world, cases in pairs]
    return lines


def check_fault_groups(pairs: Sequence[tuple[int, Sequence[Case]]], tp: int | None) -> None:
    """Raise ValueError naming the scenario when an injection names a TP group a planned world does not have."""
    for world, cases in pairs:
        size = tp_size(tp, world)
        groups = group_count(world, size)
        for case in cases:
            missing = [g for g in case.fault_groups or () if g >= groups]
            if missing:
                raise ValueError(f"{case.key}: an injection names TP group {missing[0]}, but world {world} at tp "
                                 f"{size} has {groups} group(s) (0..{groups - 1})")


def planned_cases(pairs: Sequence[tuple[int, Sequence[Case]]], tp: int | None,
                  rendezvous: Rendezvous = Rendezvous()) -> dict[int, int]:
    """Cases to run per reported world (the TP size with ``--tp``), one per TP group this node reports: what the
    bar counts."""
    planned: dict[int, int] = {}
    for world, world_cases in pairs:
        size = tp_size(tp, world)
        planned[size] = planned.get(size, 0) + len(world_cases) * len(rendezvous.local_groups(world, size))
    return planned


def run_header(why: str, impl: str, size: str, scenarios: int, pairs: WorldPlan, req: ValidateRequest, files: str,
               planted: Sequence[str], selection: str | None = None, bad_files: Sequence[str] = ()) -> str:
    """The report header: the launcher and why, the system under test, the worlds, the files, what was skipped,
    selected or planted."""
    header = (f"# rankcheck validate: {why}\n# system under test: {impl} implementation; size class {size}; "
              f"{scenarios} scenario(s); worlds {[w for w, _ in pairs]}" + (f"; tp {req.tp}" if req.tp else "") +
              f"\n# {files}\n# {describe_choice()}")
    if pairs.skipped:
        header += f"\n# {pairs.skipped}"
    if substitution():
        header += f"\n# {substitution()}"
    load_line = describe_load(req.load_scale or 1.0, startup_s=req.startup, per_launch_s=req.deadline)
    if load_line:
        header += f"\n# {load_line}"
    if selection:
        header += f"\n# {selection}"
    header += "".join(f"\n# {line}" for line in planted)
    header += "".join(f"\n# scenario file refused, not run (exit 2 at best): {line}" for line in bad_files)
    unstored = sorted({c.key for _, cs in pairs for c in cs if c.outcomes == ("golden",) and not stored_case(c)})
    if req.store and unstored:
        header += (f"\n# stored bits: {len(unstored)} gpu-size scenario(s) skipped (not in the golden store: a realistic-size "
                   f"reference takes minutes on a CPU; their check is the golden reference recomputed in this run)")
    return header


def run_validate(req: ValidateRequest, *, stream=None) -> int:
    """Run the requested validation and return the report's exit code (``harness.reports.report.Report.verdict``)."""
    gpus = gpu_count()
    if req.load_scale is None:  # once, at the start: every job of the run gets the same allowances
        req = replace(req, load_scale=load_factor())
    launcher, why = resolve(req.launcher, gpus)
    size = size_class(req.size, launcher, gpus)
    found, bad_files = discover_each(req.scenario_root)
    for message in bad_files:  # before selection: a name that fails to resolve may be the bad file's
        print(f"rankcheck validate: scenario file refused, not run: {message}", file=sys.stderr)
    cases = select(found, family=req.family, names=expand_globs(found, req.scenarios), size=size)
    pairs = plan_worlds(cases, req)
    selection = narrow_plan(pairs, req, launcher)
    if req.collect_only:
        return print_collected(pairs, req, launcher, selection, stream if stream is not None else sys.stdout)
    run_dir = writable_dir(Path(req.run_dir) if req.run_dir else default_run_dir(), "run directory")
    if req.cache:
        writable_dir(cache_root(), "cache directory ($RANKCHECK_CACHE_DIR; --no-cache runs without it)")
    with run_dir_lock(run_dir):  # another run's directory is refused here, before anything in it changes
        planted = plant_injections(pairs, req, run_dir / "injected") if req.inject else []
        check_fault_groups(pairs, req.tp)
        # each node of a multi-node job writes its own files (X.node<k>.xml), merged by `harness merge-reports`
        junit = req.rendezvous.node_path(req.junit or run_dir / "report.xml")
        json_path = req.rendezvous.node_path(req.json or run_dir / "report.json")
        planned = planned_cases(pairs, req.tp, req.rendezvous)
        first_settings = settings_for(launcher, run_dir, max([w for w, _ in pairs] or [1]), gpus, impl=req.impl)
        impl = first_settings.impl
        header = run_header(why, impl, size, len(cases), pairs, req, f"run dir {run_dir}; junit {junit}; json {json_path}",
                            planted, selection, bad_files)
        job_numbers = JobSequence()
        report = Report(header=header, junit_path=junit, json_path=json_path, planned=planned, stream=stream,
                        allow_unavailable=req.allow_unavailable, empty_reason=pairs.why_empty, refused_inputs=bad_files,
                        provenance=provenance.collect(time.time(), job_env=first_settings.env)
                        | {"node": req.rendezvous.describe()}, interrupt_signal=received_signal)
        try:
            with report:
                run_plan(req, launcher, gpus, run_dir, pairs, report, job_numbers)
        except KeyboardInterrupt:
            # also when the interrupt came before the report was drawn, or during its last write: the files
            # must say so, never OK
            report.interrupted = True
            report.finish()
        if not report.interrupted:
            # the job stores this node serves, until every node is done with them (each has its deadline)
            job_numbers.stores.release_all()
        return report.exit_code()  # a refused scenario file makes it 2 at best (Report.verdict)


def run_plan(req: ValidateRequest, launcher: str, gpus: int, run_dir: Path, pairs, report: Report,
             job_numbers) -> None:
    """Run every planned case: the reference pool in the background, job units in lanes (harness.launch.schedule)."""
    root = cache_root() if req.cache else None
    cache_dir = root / "references" if root else run_dir / "refcache"
    impl = req.impl or settings_for(launcher, run_dir, 1, gpus).impl
    units = job_units([(w, cs) for w, cs in pairs if cs], impl)
    shared_devices = launcher != "torchrun" or gpus < max([u.world for u in units] or [1])
    cores = os.cpu_count() or 1
    heavy = [(u.world, u.cases) for u in units if u.heavy]
    workers = req.ref_workers if req.ref_workers is not None else (max(1, cores // 2) if heavy and gpus else 0)
    pool = ReferencePool(run_dir, cache_dir, queue_items(heavy), processes=workers, threads=1)
    lanes = req.lanes or default_lanes(nnodes=req.rendezvous.nnodes, tp=req.tp, pool_busy=pool.processes > 0)
    durations = UnitDurations(root / DURATIONS_FILE if root else None)
    keys = {id(u): u.key(launcher, impl) for u in units}
    if req.rendezvous.nnodes == 1:  # every node must start the same jobs in the same order: no local reordering
        units = order_units(units, durations, [keys[id(u)] for u in units], pool_busy=pool.processes > 0)
    report.note(pool.describe() + f"\n# lanes: {lanes} job unit(s) at once ({len(units)} units" +
                (", longest first as measured before" if durations.past else "") + ")" +
                ("" if shared_devices else "; one GPU per rank, GPUs handed to units") +
                f"\n# cache: {root if root else 'off (--no-cache): references in the run directory'}")
    # the cores left by the pool, shared by the lanes' processes (virtual jobs compute on the CPU too)
    threads = str(max(1, (cores - pool.processes * pool.threads) // lanes))
    stop = threading.Event() if req.exitfirst else None  # -x: set by the first failing result

    def add(result) -> None:
        """Report a result; with -x a failing one stops every new job."""
        report.add(result)
        if stop is not None and result.status in FAILING:
            stop.set()

    def settings_of(world: int):
        """The job settings of one world, with the cache and thread environment of this run."""
        allowances = scaled_defaults(req.load_scale or 1.0, startup_s=req.startup, per_launch_s=req.deadline)
        settings = settings_for(launcher, run_dir, world, gpus, **allowances, tp=req.tp, impl=req.impl, rendezvous=req.rendezvous, store=req.store)
        settings.cache_dir = cache_dir
        settings.stop = stop
        settings.env.update(kernel_cache_env(root, run_dir))
        if launcher == "virtual":
            settings.env["OMP_NUM_THREADS"] = threads
        return settings

    timeline = UnitTimeline(lanes)

    def run_unit(settings, unit) -> None:
        """One unit's cases through a JobRunner of its own (verdicts reported as they settle); its time noted."""
        if stop is not None and stop.is_set():
            return
        started = timeline.start()
        runner = JobRunner(settings, argv_builder(launcher), add, report.note, job_numbers)
        try:
            runner.run(list(unit.cases), unit.world)
        finally:
            seconds = timeline.note(started, unit, runner.after_verdicts_s)
        durations.note(keys[id(unit)], seconds)

    # two spares a lane: a lane of short jobs (a few seconds each) takes spares faster than one starts up
    # at most a lane's worth starting at once: the first jobs' spares start before their replacements
    standby = StandbyPool(python(), 2 * lanes if launcher == "virtual" and req.standby else 0,
                          env=job_env(settings_of(1), 1), cwd=str(REPO_ROOT), max_starting=lanes,
                          spare_dir=run_dir / "jobs" / "standby", stacks_dir=stacks_dir(run_dir))
    report.note(standby.describe())

    def settings_with_standby(world: int):
        """The job settings of one world, with this run's spare processes."""
        settings = settings_of(world)
        settings.standby = standby
        return settings

    with pool, standby:
        try:
            run_units(units, settings_with_standby, run_unit, lanes=lanes,
                      devices=None if shared_devices else DevicePool(gpus))
        finally:
            durations.save()  # what the finished units took, also when the run was cut short
            timeline.write(run_dir)
            report.note(timeline.summary())
    if stop is not None and stop.is_set():
        report.note(not_run_note(pairs, req, launcher, report))


def not_run_note(pairs, req: ValidateRequest, launcher: str, report: Report) -> str:
    """The note naming the planned cases that ``-x`` left without a result."""
    done = {r.case_id for r in report.cases()}
    missing = [i for i in collected_ids(pairs, req, launcher) if i not in done]
    names = ", ".join(missing[:SKIPPED_NAMES_SHOWN]) + (f" and {len(missing) - SKIPPED_NAMES_SHOWN} more"
                                                        if len(missing) > SKIPPED_NAMES_SHOWN else "")
    return (f"# -x: stopped after the first failure; {len(missing)} planned case(s) not run"
            + (f": {names}" if missing else ""))


__all__ = ["ValidateRequest", "WorldPlan", "check_fault_groups", "collected_ids", "narrow_plan", "not_run_note",
           "plan_worlds", "planned_cases", "plant_injections", "print_collected", "requested_worlds", "run_plan",
           "run_validate", "size_class"]
