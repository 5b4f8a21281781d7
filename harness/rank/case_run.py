"""One rank's run of one case, as explicit phases: load, construct, launch and compare, settle, write.

``run_case`` (``CaseRun.run``) goes through the case in this order, each
step a method:

1. ``_load``: the scenario as this rank's TP group runs it (the faults planted
   in another group are not this group's), the family's adapter (its module:
   CuTe DSL on the kernel path; a missing one makes the case *not
   available*), the flat plan of launches for this group rank, and the
   reference cache (``harness.references.cache.ReferenceCache``: the unsharded
   reference of a launch is computed once, by the first rank that needs it,
   and kept across runs and world sizes).
2. ``_construct``: the world handle (``make_handle``), the per-rank system and,
   for a graph scenario on the kernel path, its CUDA graphs.
3. ``_launch_all``: every launch of the plan. Injected faults are acted on
   first (``harness.rank.faults``); a call the scenario expects refused is
   launched once and judged (``_run_bad_call``); any other is launched (twice
   under ``repeat_launch``; the repeat is not compared), then checked for
   agreement on the kernel path (``harness.rank.agreement``; the golden path
   checks before the launch), its reference fetched and its outputs compared
   bit for bit (``harness.rank.compare``).
4. ``_settle``: the comparison, the reference counters, the final state and,
   on rank 0 of a stored case, the golden store check
   (``harness.rank.golden_check``).
5. ``_finish``: the time spent per phase (``harness.wire.phases``), the ``done``
   progress record, and the result file (``harness.wire.rank_result.RankResult``).

Errors: ``NotAvailable`` anywhere makes the result ``not-available`` with the
reason; ``InjectedCrash`` leaves the rank. An unexpected error in steps 2-3
is the case's error with the phase it happened in (``construct`` or ``launch
<k>``), and the kernel's diagnostic record is dumped; inside a launch it may
leave peers inside a collective, so, unless the scenario expects an error or
the ranks named a disagreement (raised on every rank alike), the rank gives
the job up (``abandon``: the worker exits with ``ABANDON_EXIT``). Any other
error (loading, building inputs, settling) is the case's error in phase
``build``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from harness.families import adapter, catalog, rank_device
from harness.wire.errors import NotAvailable
from harness.families.arch_facts import facts_file
from harness.rank.agreement import CallDisagreement, check_agreement, deviations
from harness.rank.compare import Comparison, compare_outputs
from harness.rank.faults import InjectedCrash, act_before_launch, expected_of, launch_attempts, refusal
from harness.rank.golden_check import StoreCollector
from harness.rank.graphs import GraphLaunches, capture_problem
from harness.references.cache import REFERENCE_WAIT_S, ReferenceCache
from harness.references.pool import mark_stored
from harness.wire.case_files import case_dir, result_path, stored_case
from harness.wire.phases import PhaseClock
from harness.wire.progress import ProgressWriter
from harness.wire.rank_result import RankResult, error_of
from harness.wire.worker_evidence import use_case_directory
from kernels.hostcopy import outputs_to_host  # torch only, no CuTe DSL


def _safe_state(system: Any) -> dict:
    """The system's state() (or an empty dict when it has none or fails)."""
    try:
        return dict(system.state()) if system is not None else {}
    except Exception as exc:  # noqa: BLE001 - state is diagnostic only
        return {"state_error": repr(exc)}


def _dump_diag(system: Any, out_dir: Path, rank: int, launch: int) -> None:
    """Dump the system's kernel diagnostic record (``kernels.diag.DiagRecord``), if it keeps one, as JSON."""
    from kernels.diag import record_of  # noqa: PLC0415 - imports CuTe DSL: loaded only for a kernel run's record

    record = record_of(system)
    if record is not None:
        try:
            record.dump(out_dir / f"rank{rank}.diag.json", rank=rank, launch=launch)
        except Exception:  # noqa: BLE001 - the progress records still tell the story
            pass


def _graph_launches(impl: str, system: Any, handle: Any, launches: list,
                    family_problem: str | None = None) -> tuple[Any, dict | None]:
    """``(GraphLaunches or None, the case's graph note)``: graphs only for a kernel system that can be captured.

    A graph scenario the golden runs is ``not-available`` (the CPU has no CUDA graphs); one whose kernel system
    cannot be captured is ``not-captured``, which the verdict fails (``harness.launch.verdict``)."""
    if not any(launch.graph is not None for launch in launches):
        return None, None
    if impl != "kernel":
        return None, {"mode": "not-available", "reason": "the golden implementation runs on the CPU, which has no "
                                                         "CUDA graphs"}

    problem = family_problem or capture_problem(system)
    if problem is not None:
        return None, {"mode": "not-captured", "reason": problem}
    device = getattr(system, "device", None)
    return GraphLaunches(system, device if device is not None else rank_device(handle)), None


class CaseRun:
    """One case as one rank (``group_rank`` of a TP group of size ``tp``) runs it, step by step."""

    def __init__(self, spec: dict, *, rank: int, group_rank: int, tp: int, group: int | None, impl: str,
                 run_dir: str, make_handle: Callable[[Any], Any], store: str | None = None,
                 cache_dir: str | None = None, job_index: int | None = None) -> None:
        self.spec, self.rank, self.group_rank, self.tp, self.group = spec, rank, group_rank, tp, group
        self.impl, self.run_dir, self.make_handle, self.store_mode = impl, run_dir, make_handle, store
        self.cache_dir = cache_dir
        self.out_dir = case_dir(run_dir, spec["family"], spec["name"], tp, group)
        self.progress = ProgressWriter(self.out_dir, rank)
        self.started = time.monotonic()
        self.clock = PhaseClock((spec["family"], spec["name"], tp, group))
        self.result = RankResult(rank=rank, group=group, group_rank=group_rank, tp=tp, impl=impl, job=job_index,
                                 family=spec["family"], name=spec["name"])
        self.system: Any = None
        self.graphs: Any = None
        self.agreement_comm: Any = None
        self.reference_keys: list[str] = []  # the key of every launch's reference, in order
        self.phase = "construct"  # where an unexpected error of steps 2-3 happened

    def run(self) -> RankResult:
        """Run the case and write this rank's result; return it."""
        try:
            self.progress.write("start", -1)
            self._load()
            try:
                self._construct()
                self._launch_all()
            except (NotAvailable, InjectedCrash):
                raise
            except Exception as exc:  # noqa: BLE001 - recorded; expected errors are judged by the launcher
                self._record_launch_error(exc)
            self._settle()
        except NotAvailable as exc:
            self.result.status = "not-available"
            self.result.error = {"type": "NotAvailable", "message": str(exc)}
        except InjectedCrash:
            self.progress.close()
            raise
        except Exception as exc:  # noqa: BLE001 - loading or building failed: an error of the case
            self.result.status = "error"
            self.result.error = error_of(exc) | {"phase": "build"}
        return self._finish()

    # -- 1. load

    def _load(self) -> None:
        """The scenario, the family's adapter and facts, the plan of launches and the reference cache."""
        full = catalog.load(self.spec["path"])
        self.scenario = full.in_group(self.group)  # the faults planted in another TP group are not this group's
        self.case = catalog.case_of(full).in_group(self.group)
        with self.clock.phase("construct"):  # the family's module: CuTe DSL on the kernel path
            self.fam = adapter(self.case.family)
            self.fam.check_available(self.impl)
            self.result.facts = facts_file(self.fam.arch_facts)  # which architecture's facts the golden used here
        with self.clock.phase("inputs"):
            self.static, self.config, self.launches = catalog.plan(self.scenario, self.tp, self.group_rank)
            self.config.update(self.fam.start_config(self.scenario.initial_state()))
        self.total = Comparison(tolerance_ulps=self.case.tolerance_ulps)
        with self.clock.phase("reference"):  # the static tensors' digest
            self.refs = ReferenceCache(self.cache_dir or Path(self.run_dir) / "refcache", self.case.family,
                                       self.fam.tp_key, self.fam.golden_config(self.config),
                                       self.static,  # the key covers the arch facts used
                                       shared_in_process=True)
        checks_store = self.group_rank == 0 and not self.group and stored_case(catalog.case_of(full))
        self.stored = StoreCollector(self.store_mode if checks_store else None)

    # -- 2. construct

    def _construct(self) -> None:
        """The world handle, the per-rank system and its CUDA graphs (if the scenario captures any)."""
        with self.clock.phase("construct"):
            handle = self.make_handle(self.fam)
            self.agreement_comm = handle if callable(getattr(handle, "all_gather", None)) else None
            use_case_directory(self.out_dir)
            self.system = self.fam.make_system(self.impl, handle, self.static, self.config)
            self.graphs, self.result.graph = _graph_launches(self.impl, self.system, handle, self.launches,
                                                             self.fam.graph_capture_problem)

    # -- 3. launch and compare

    def _state(self) -> dict:
        """The system's state now, for a progress record."""
        return _safe_state(self.system)

    def _launch_all(self) -> None:
        """Every launch of the plan, in order (faults acted on first; bad calls judged, the others compared)."""
        for launch in self.launches:
            if act_before_launch(launch, self.progress, self._state):
                continue
            self.phase = f"launch {launch.index}"
            if launch.expected_error is not None:
                self._run_bad_call(launch)
                continue
            for attempt in range(launch_attempts(launch)):
                outputs = self._launch(launch, repeated=attempt > 0)
                if attempt == 0:  # a repeated launch is not compared: the peers did not make it
                    self._agree_after(launch)
                    self._compare(launch, outputs)

    def _begin(self, launch: Any, repeated: bool = False) -> dict:
        """Record the launch's start (and, on the golden path, check the ranks agree first); return the state before."""
        before = self._state()
        if repeated:
            self.progress.write("repeat", launch.index, launch.call_params, before)
        self.progress.begin(launch.index, launch.call_params, before, deviates=deviations(launch))
        if self.impl == "golden" and self.agreement_comm is not None:
            with self.clock.phase("kernel"):
                check_agreement(self.agreement_comm, launch)
        return before

    def _launched(self, launch: Any) -> dict:
        """Launch the call (a graph replay where it was captured) and copy its outputs to the host."""
        # Host copies now, through pinned memory: a pageable copy later (the
        # comparison's) could wait behind a virtual peer's (kernels.hostcopy).
        with self.clock.phase("kernel"):
            if self.graphs is not None and launch.graph is not None and launch.expected_error is None:
                launched = self.graphs.launch(launch.graph, launch.call_inputs, launch.call_params)
            else:
                launched = self.system.launch(launch.call_inputs, launch.call_params)
            return outputs_to_host(launched)

    def _launch(self, launch: Any, repeated: bool) -> dict:
        """One launch of an ordinary call; its host outputs (an error is raised with the state around it kept)."""
        before = self._begin(launch, repeated)
        try:
            outputs = self._launched(launch)
        except Exception:
            self.result.state_before, self.result.state_after = before, self._state()
            raise
        after = self._state()
        self.progress.end(launch.index, launch.call_params, after)
        if not repeated:
            problem = self.fam.protocol_problem(self.config, launch.call_inputs, launch.call_params, before, after)
            if problem:
                self.result.protocol_mismatches.append({"launch": launch.index, "problem": problem})
        return outputs

    def _run_bad_call(self, launch: Any) -> None:
        """Launch a call the scenario expects refused and record whether it was (error, state unchanged)."""
        before = self._begin(launch)
        try:
            self._launched(launch)
        except Exception as exc:  # noqa: BLE001 - the refusal is judged by the launcher
            after = self._state()
            self.result.refused.append(refusal(launch, exc, before, after))
            self.progress.write("refused", launch.index, launch.call_params, after,
                                error=f"{type(exc).__name__}: {exc}")
            return
        self.progress.end(launch.index, launch.call_params, self._state())
        self.result.not_refused.append({"launch": launch.index, "expected": expected_of(launch)})

    def _agree_after(self, launch: Any) -> None:
        """On the kernel path, check after the launch that the ranks made the same call."""
        if self.impl == "kernel" and self.agreement_comm is not None:
            # After the launch, not before: a disagreement that hangs the kernels
            # must stay reproducible (the watchdog names it); one the kernels
            # cannot see (a parameter the protocol does not exchange) is named here.
            with self.clock.phase("kernel"):
                check_agreement(self.agreement_comm, launch)

    def _compare(self, launch: Any, outputs: dict) -> None:
        """Fetch the launch's reference (cached) and compare this rank's outputs with it bit for bit."""
        self.result.launches_done += 1
        self.progress.write("reference", launch.index, launch.call_params, self._state())
        key = self.refs.key(launch.agreed_inputs, launch.agreed_params)
        self.reference_keys.append(key)
        with self.clock.phase("reference"):
            reference = self.refs.get(
                key,
                lambda: self.fam.reference(self.static, self.config, launch.agreed_inputs, launch.agreed_params),
                wait_s=REFERENCE_WAIT_S, heartbeat=self.progress.touch)
        self.stored.add(launch, reference)
        with self.clock.phase("compare"):
            self.total.merge(compare_outputs(outputs, reference, rank=self.group_rank, axes=self.fam.output_axes,
                                             names=self.fam.compared_outputs(reference),
                                             tolerance_ulps=self.case.tolerance_ulps, launch=launch.index), keep=8)

    def _record_launch_error(self, exc: Exception) -> None:
        """Make an unexpected error of steps 2-3 the case's error; give the job up where peers may be stuck."""
        self.result.status = "error"
        self.result.error = error_of(exc) | {"phase": self.phase}
        _dump_diag(self.system, self.out_dir, self.rank, self.result.launches_done)
        self.progress.write("error", -1, {}, self._state(), error=f"{type(exc).__name__}: {exc}")
        if self.phase != "construct" and "error" not in self.case.outcomes and not isinstance(exc, CallDisagreement):
            self.result.abandon = True

    # -- 4. settle

    def _settle(self) -> None:
        """The comparison, the reference counters, the final state and the golden store check."""
        if self.graphs is not None:
            self.result.graph = self.graphs.summary()
        self.result.comparison = self.total.to_json()
        # by this rank; the others (and earlier runs) left theirs in the cache
        self.result.references = {"computed": self.refs.computed, "loaded": self.refs.loaded,
                                  "discarded": self.refs.discarded, "discarded_why": self.refs.discarded_why[:4]}
        self.result.state = self._state()
        if self.stored.mode and self.result.status == "ok" and self.stored.outputs:
            with self.clock.phase("store"):
                self.result.store = self.stored.settle(self.case, self.tp, self.static)
        self._mark_references_stored()

    def _mark_references_stored(self) -> None:
        """As rank 0 of a case without TP groups that compared every launch: note in the shared cache that this
        (scenario, world)'s references are all stored (``harness.references.pool``), so the next run's pool skips it."""
        compared = len(self.reference_keys) == len(self.launches) and self.reference_keys
        if self.cache_dir and self.group_rank == 0 and self.group is None and self.result.status == "ok" and compared:
            mark_stored({"path": self.spec["path"], "world": self.tp}, self.reference_keys, Path(self.cache_dir))

    # -- 5. finish

    def _finish(self) -> RankResult:
        """Add the phase times, write the ``done`` record and the result file; return the result."""
        self.result.time_s = time.monotonic() - self.started
        self.result.phases = self.clock.seconds
        if self.clock.startup_marks:
            self.result.startup = self.clock.startup_marks
        self.progress.write("done", -1, {}, self.result.state or {})
        self.progress.close()
        self.result.write(result_path(self.out_dir, self.rank))
        return self.result


def run_case(spec: dict, *, rank: int, group_rank: int, tp: int, group: int | None, impl: str, run_dir: str,
             make_handle: Callable[[Any], Any], store: str | None = None, cache_dir: str | None = None,
             job_index: int | None = None) -> RankResult:
    """Run one case as one rank (``group_rank`` of a TP group of size ``tp``) of job ``job_index``; write and return its result."""
    return CaseRun(spec, rank=rank, group_rank=group_rank, tp=tp, group=group, impl=impl, run_dir=run_dir,
                   make_handle=make_handle, store=store, cache_dir=cache_dir, job_index=job_index).run()
