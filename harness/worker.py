"""The per-rank entry: run a batch of scenarios as one rank, record progress, compare, write results.

Started by torchrun (``python -m harness.worker --job JOB.json``, one
process per rank) or, for the virtual launcher, once for all ranks
(``--virtual N``: N ranks as threads of this process, meeting through
``golden.comm.ThreadWorld`` or the kernel fabric). The job file lists the
cases (scenario file, family, name, TP size) and the implementation
(``golden`` or ``kernel``); each case is run in order and leaves, per rank,
in ``<run>/cases/<family>.<name>/w<tp>[.g<group>]/``:

- ``rank<k>.progress.jsonl``: ``start``, then ``begin``/``end`` per launch
  (``harness.progress``), written before the launch it announces;
- ``rank<k>.result.json`` (atomic): the comparison with the reference
  (exact bits; first mismatches and the exact count), or the error raised
  with its launch and the system state before and after it, or
  ``not-available`` with the reason; and the seconds the rank spent in each
  phase of the case (``harness.phases``: start-up, inputs, construct,
  compile, kernel, reference, compare, store).

Per case, the rank builds the scenario's full inputs (identical on every
rank, from the scenario's seed), makes its system (which takes its shard),
and for every launch of the flat plan compares its outputs bit for bit with
the unsharded reference (computed once by the first rank that needs it and
kept across runs by ``harness.refcache.ReferenceCache``; also shared across
world sizes when the inputs are equal).
Rank 0 of a golden-outcome case also checks (or, for ``harness golden
--regenerate``, records) the reference outputs' digests in the golden store
(``store_golden``). Injected faults addressed to this rank are
acted on here: ``hang`` (record it, then sleep forever before the launch),
``crash`` (record it, then exit with ``CRASH_EXIT``, kill itself with
SIGKILL, or raise), ``skip_launch`` (record it and do not launch),
``repeat_launch`` (launch twice), ``delay`` (sleep first);
``rank_disagree`` and ``bad_input`` arrive through the inputs the builders
make for this rank. A refused call (``bad_input``) is checked here: the
error's type and message, and the system state unchanged. On the golden
path every launch first checks that all ranks make the same call
(``check_agreement``); on the kernel path every completed launch does, so a
disagreement that hangs the kernels is still reproduced (and named by the
watchdog) and one they complete silently is named. An unexpected exception inside a
launch may leave peers inside a collective, so the rank then writes its
result and exits with ``ABANDON_EXIT``: the launcher ends the job and runs
the remaining cases in a fresh one. With TP groups each rank makes only its
own group's process group, and a case of the job file may name the groups
that run it (``groups``: a case run again where another group's fault cut it
short; ``runs_in_group``); the other groups skip it. At start every worker process registers
a stack dump on SIGUSR1 (``harness.evidence.register_worker``), so a rank
that hangs still shows the watchdog where.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from harness import standby
from harness.evidence import register_worker
from harness.phases import PhaseClock, count_start_up_from, mark_startup, process_started_at
from harness.refcache import REFERENCE_WAIT_S, ReferenceCache

CRASH_EXIT = 43
ABANDON_EXIT = 44


def case_dir(run_dir: str | Path, family: str, name: str, tp: int, group: int | None) -> Path:
    """The directory of one case's per-rank records."""
    suffix = f".g{group}" if group is not None else ""
    return Path(run_dir) / "cases" / f"{family}.{name}" / f"w{tp}{suffix}"


def result_path(directory: str | Path, rank: int) -> Path:
    """The result file of ``rank`` in a case directory."""
    return Path(directory) / f"rank{rank}.result.json"


def _write_json(path: Path, doc: dict) -> None:
    """Write ``doc`` to ``path`` atomically."""
    from harness.report import atomic_write  # noqa: PLC0415

    atomic_write(path, json.dumps(doc, indent=1, sort_keys=True, default=str))


def _error_of(exc: BaseException) -> dict:
    """An exception as a JSON-ready dict (type, message, last traceback lines)."""
    return {"type": type(exc).__name__, "types": [cls.__name__ for cls in type(exc).__mro__], "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]}


def _safe_state(system: Any) -> dict:
    """The system's state() (or an empty dict when it has none or fails)."""
    try:
        return dict(system.state()) if system is not None else {}
    except Exception as exc:  # noqa: BLE001 - state is diagnostic only
        return {"state_error": repr(exc)}


def _deviations(launch: Any) -> dict:
    """``{param: [this rank's, the call's]}`` (and ``{"<input>.shape": [...]}``) where this rank's launch differs."""
    mine, agreed = launch.call_params, launch.agreed_params
    found = {k: [mine.get(k), agreed.get(k)] for k in sorted(set(mine) | set(agreed)) if mine.get(k) != agreed.get(k)}
    for name in sorted(set(launch.call_inputs) & set(launch.agreed_inputs)):
        shapes = [list(getattr(t, "shape", ())) for t in (launch.call_inputs[name], launch.agreed_inputs[name])]
        if shapes[0] != shapes[1]:
            found[f"{name}.shape"] = shapes  # e.g. a rank that reduces other rows than its peers
    return found


class InjectedCrash(RuntimeError):
    """The ``crash`` injection with ``how: exception``: raised out of the rank on purpose."""


def _sleep_forever() -> None:
    """Block this rank until it is killed (the injected hang)."""
    while True:
        time.sleep(3600)


def _crash(how: str) -> None:
    """End this rank the way a ``crash`` injection says: exit code, signal or exception."""
    if how == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exception":
        raise InjectedCrash("injected crash (how: exception)")
    os._exit(CRASH_EXIT)


def _error_matches(exc: BaseException, expected: Any) -> bool:
    """Whether ``exc`` is the expected error (class name or a base's, and the message regex)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return expected.type in names and re.search(expected.match, str(exc)) is not None


AGREEMENT_BYTES = 1024


class CallDisagreement(RuntimeError):
    """Ranks are not making the same call (raised on every rank at the same exchange, so they stay in step)."""


def _call_description(launch: Any) -> dict:
    """What this rank is about to launch: index, call, params, and each input's shape and dtype."""
    shapes = {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sorted(launch.call_inputs.items())
              if hasattr(v, "shape")}
    return {"launch": launch.index, "call": launch.call, "params": {k: repr(v) for k, v in
                                                                   sorted(launch.call_params.items())},
            "inputs": shapes}


def check_agreement(comm: Any, launch: Any) -> None:
    """Raise RuntimeError naming every rank's call when the ranks of ``comm`` are not making the same call.

    The golden loops exchange data but no protocol metadata (the kernels'
    launch tags and generations), so on the golden path the harness checks
    that every rank makes the same launch with the same parameters and input
    shapes before it starts; a disagreement (a skipped or repeated launch, a
    rank with other rows or parameters) is then named here instead of
    silently pairing unrelated exchanges. On the kernel path it runs after
    each completed launch: a disagreement that the kernels' protocol does not
    exchange (e.g. markov_sharded's ``query_per_row``) completes with wrong
    bits instead of hanging, and is named here.
    """
    import torch  # noqa: PLC0415

    mine = _call_description(launch)
    payload = json.dumps(mine, sort_keys=True).encode()[: AGREEMENT_BYTES - 4]
    buf = torch.zeros(AGREEMENT_BYTES, dtype=torch.uint8)
    buf[:4] = torch.tensor(list(len(payload).to_bytes(4, "little")), dtype=torch.uint8)
    buf[4:4 + len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
    gathered = comm.all_gather(buf).cpu()
    views = []
    for row in gathered:
        raw = bytes(row.tolist())
        views.append(json.loads(raw[4:4 + int.from_bytes(raw[:4], "little")].decode()))
    if all(v == views[0] for v in views):
        return
    keys = sorted({k for v in views for k in v} - {"inputs"}) + ["inputs"]
    differing = [k for k in keys if any(v.get(k) != views[0].get(k) for v in views)]
    parts = [f"rank {r}: " + ", ".join(f"{k} {v.get(k)}" for k in differing) for r, v in enumerate(views)]
    raise CallDisagreement(f"ranks disagree on the call at rank {comm.rank}'s launch {launch.index}: " + "; ".join(parts))


def stored_case(case: Any) -> bool:
    """Whether the golden store holds ``case``'s bits: golden-outcome cases of size class cpu.

    A gpu-size reference takes minutes on a CPU; on the GPU machine those
    cases are checked by recomputing the reference with the golden instead.
    """
    return case.outcomes == ("golden",) and case.size == "cpu"


def store_golden(mode: str, case: Any, tp: int, static: dict, agreed: list[dict], outputs: dict,
                 root: str | Path | None = None) -> dict:
    """Check (``mode`` check) or record (``record``) the reference outputs' digests in golden/store.py.

    The entry is ``family/name`` with variant ``world<tp>``; outputs are
    flattened to ``launch<k>.<name>``; the input digest covers the static
    tensors and each compared launch's agreed inputs, in launch order.
    ``root``: the store directory (default ``golden/data``).
    """
    try:
        from golden import store  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        return {"status": "missing", "message": f"golden.store not importable: {exc}"}
    digest = store.inputs_digest(static, *agreed)
    variant = f"world{tp}"
    golden_store = store.GoldenStore(root)
    try:
        if mode == "record":
            golden_store.record(case.key, digest, outputs, variant=variant, regenerate=True)
            return {"status": "recorded", "message": f"{len(outputs)} outputs recorded ({variant})"}
        golden_store.check(case.key, digest, outputs, variant=variant)
        return {"status": "ok", "message": f"{len(outputs)} outputs match the stored bits ({variant})"}
    except store.GoldenMissing as exc:
        return {"status": "missing", "message": str(exc)}
    except store.InputDigestMismatch as exc:
        return {"status": "input-changed", "message": str(exc)}
    except store.GoldenError as exc:
        return {"status": "mismatch", "message": str(exc)}


def _dump_diag(system: Any, out_dir: Path, rank: int, launch: int) -> None:
    """Dump the system's kernel diagnostic record (``kernels.diag.DiagRecord``), if it keeps one, as JSON."""
    for name in ("diag_record", "diag"):
        record = getattr(system, name, None)
        if record is not None and callable(getattr(record, "dump", None)):
            try:
                record.dump(out_dir / f"rank{rank}.diag.json", rank=rank, launch=launch)
            except Exception:  # noqa: BLE001 - the progress records still tell the story
                pass
            return


def _graph_launches(impl: str, system: Any, handle: Any, launches: list,
                    family_problem: str | None = None) -> tuple[Any, dict | None]:
    """``(GraphLaunches or None, the case's graph note)``: graphs only for a kernel system that can be captured."""
    if not any(launch.graph is not None for launch in launches):
        return None, None
    if impl != "kernel":
        return None, {"mode": "eager", "reason": "the golden implementation runs on the CPU"}
    from harness.families import rank_device  # noqa: PLC0415
    from harness.graphs import GraphLaunches, capture_problem  # noqa: PLC0415

    problem = family_problem or capture_problem(system)
    if problem is not None:
        return None, {"mode": "eager", "reason": problem}
    device = getattr(system, "device", None)
    return GraphLaunches(system, device if device is not None else rank_device(handle)), None


def run_case(spec: dict, *, rank: int, group_rank: int, tp: int, group: int | None, impl: str,
             run_dir: str, make_handle: Callable[[Any], Any], store: str | None = None,
             cache_dir: str | None = None, job_index: int | None = None) -> dict:
    """Run one case as one rank (``group_rank`` of a TP group of size ``tp``) of job ``job_index`` and write its result."""
    from harness import compare as cmp  # noqa: PLC0415
    from harness.families import NotAvailable, adapter, catalog  # noqa: PLC0415
    from harness.arch_facts import facts_file  # noqa: PLC0415
    from harness.progress import ProgressWriter  # noqa: PLC0415
    from kernels.hostcopy import outputs_to_host  # noqa: PLC0415 - torch only, no CuTe DSL

    out_dir = case_dir(run_dir, spec["family"], spec["name"], tp, group)
    progress = ProgressWriter(out_dir, rank)
    started = time.monotonic()
    clock = PhaseClock((spec["family"], spec["name"], tp, group))
    result: dict = {"rank": rank, "group": group, "group_rank": group_rank, "tp": tp, "impl": impl, "job": job_index,
                    "family": spec["family"], "name": spec["name"], "status": "ok", "launches_done": 0,
                    "comparison": None, "error": None, "refused": [], "not_refused": []}
    system = graphs = None
    try:
        progress.write("start", -1)
        full = catalog.load(spec["path"])
        scenario = full.in_group(group)  # the faults planted in another TP group are not this group's
        case = catalog.case_of(full).in_group(group)
        with clock.phase("construct"):  # the family's module: CuTe DSL on the kernel path
            fam = adapter(case.family)
            fam.check_available(impl)
            result["facts"] = facts_file(fam.arch_facts)  # which architecture's facts the golden used here
        with clock.phase("inputs"):
            static, config, launches = catalog.plan(scenario, tp, group_rank)
            config.update(fam.start_config(scenario.initial_state()))
        total = cmp.Comparison(tolerance_ulps=case.tolerance_ulps)
        with clock.phase("reference"):  # the static tensors' digest
            refs = ReferenceCache(cache_dir or Path(run_dir) / "refcache", case.family, fam.tp_key,
                                  fam.golden_config(config), static,  # the key covers the arch facts used
                                  shared_in_process=True)
        store_mode = store if group_rank == 0 and not group and stored_case(catalog.case_of(full)) else None
        agreed: list[dict] = []
        store_outputs: dict = {}
        phase = "construct"
        try:
            with clock.phase("construct"):
                handle = make_handle(fam)
                agreement_comm = handle if callable(getattr(handle, "all_gather", None)) else None
                system = fam.make_system(impl, handle, static, config)
                graphs, result["graph"] = _graph_launches(impl, system, handle, launches, fam.graph_capture_problem)
            for launch in launches:
                k = launch.index
                inj = {i.kind: i for i in launch.injections}
                if "delay" in inj:
                    progress.write("delay", k, launch.call_params, _safe_state(system),
                                   seconds=inj["delay"].get("seconds"))
                    time.sleep(float(inj["delay"].get("seconds")))
                if "hang" in inj:
                    progress.write("hang", k, launch.call_params, _safe_state(system))
                    _sleep_forever()
                if "crash" in inj:
                    progress.write("crash", k, launch.call_params, _safe_state(system), how=inj["crash"].get("how"))
                    _crash(str(inj["crash"].get("how", "exit")))
                if "skip_launch" in inj:
                    progress.write("skip", k, launch.call_params, _safe_state(system))
                    continue
                phase = f"launch {k}"
                for attempt in range(2 if "repeat_launch" in inj else 1):
                    before = _safe_state(system)
                    if attempt:
                        progress.write("repeat", k, launch.call_params, before)
                    progress.begin(k, launch.call_params, before, deviates=_deviations(launch))
                    if impl == "golden" and agreement_comm is not None:
                        with clock.phase("kernel"):
                            check_agreement(agreement_comm, launch)
                    try:
                        # Host copies now, through pinned memory: a pageable copy later (the
                        # comparison's) could wait behind a virtual peer's (kernels.hostcopy).
                        with clock.phase("kernel"):
                            if graphs is not None and launch.graph is not None and launch.expected_error is None:
                                launched = graphs.launch(launch.graph, launch.call_inputs, launch.call_params)
                            else:
                                launched = system.launch(launch.call_inputs, launch.call_params)
                            outputs = outputs_to_host(launched)
                    except Exception as exc:
                        if launch.expected_error is None:
                            result["state_before"], result["state_after"] = before, _safe_state(system)
                            raise
                        after = _safe_state(system)
                        result["refused"].append({
                            "launch": k, "type": type(exc).__name__, "message": str(exc)[:1000],
                            "expected": {"type": launch.expected_error.type, "match": launch.expected_error.match},
                            "matched": _error_matches(exc, launch.expected_error),
                            "state_unchanged": before == after, "state_before": before, "state_after": after})
                        progress.write("refused", k, launch.call_params, after, error=f"{type(exc).__name__}: {exc}")
                        break
                    progress.end(k, launch.call_params, _safe_state(system))
                    if launch.expected_error is not None:
                        result["not_refused"].append({"launch": k, "expected": {
                            "type": launch.expected_error.type, "match": launch.expected_error.match}})
                        break
                    if attempt:
                        continue
                    if impl == "kernel" and agreement_comm is not None:
                        # After the launch, not before: a disagreement that hangs the kernels
                        # must stay reproducible (the watchdog names it); one the kernels
                        # cannot see (a parameter the protocol does not exchange) is named here.
                        with clock.phase("kernel"):
                            check_agreement(agreement_comm, launch)
                    result["launches_done"] += 1
                    progress.write("reference", k, launch.call_params, _safe_state(system))
                    with clock.phase("reference"):
                        reference = refs.get(
                            refs.key(launch.agreed_inputs, launch.agreed_params),
                            lambda launch=launch: fam.reference(static, config, launch.agreed_inputs,
                                                                launch.agreed_params),
                            wait_s=REFERENCE_WAIT_S, heartbeat=progress.touch)
                    if store_mode:
                        agreed.append(launch.agreed_inputs)
                        store_outputs.update({f"launch{k}.{n}": t for n, t in reference.items()})
                    with clock.phase("compare"):
                        total.merge(cmp.compare_outputs(outputs, reference, rank=group_rank, axes=fam.output_axes,
                                                        names=fam.compared_outputs(reference),
                                                        tolerance_ulps=case.tolerance_ulps, launch=k), keep=8)
        except (NotAvailable, InjectedCrash):
            raise
        except Exception as exc:  # noqa: BLE001 - recorded; expected errors are judged by the launcher
            result["status"] = "error"
            result["error"] = _error_of(exc) | {"phase": phase}
            _dump_diag(system, out_dir, rank, result["launches_done"])
            progress.write("error", -1, {}, _safe_state(system), error=f"{type(exc).__name__}: {exc}")
            if phase != "construct" and "error" not in case.outcomes and not isinstance(exc, CallDisagreement):
                result["abandon"] = True
        if graphs is not None:
            result["graph"] = graphs.summary()
        result["comparison"] = total.to_json()
        # by this rank; the others (and earlier runs) left theirs in the cache
        result["references"] = {"computed": refs.computed, "loaded": refs.loaded, "discarded": refs.discarded}
        result["state"] = _safe_state(system)
        if store_mode and result["status"] == "ok" and store_outputs:
            with clock.phase("store"):
                result["store"] = store_golden(store_mode, case, tp, static, agreed, store_outputs)
    except NotAvailable as exc:
        result["status"] = "not-available"
        result["error"] = {"type": "NotAvailable", "message": str(exc)}
    except InjectedCrash:
        progress.close()
        raise
    except Exception as exc:  # noqa: BLE001 - loading or building failed: an error of the case
        result["status"] = "error"
        result["error"] = _error_of(exc) | {"phase": "build"}
    result["time_s"] = time.monotonic() - started
    result["phases"] = clock.seconds
    if clock.startup_marks:
        result["startup"] = clock.startup_marks
    progress.write("done", -1, {}, result.get("state") or {})
    progress.close()
    _write_json(result_path(out_dir, rank), result)
    return result


def runs_in_group(spec: dict, group: int | None) -> bool:
    """Whether TP group ``group`` runs the job's case ``spec`` (a case run again runs only in the groups that lost it)."""
    groups = spec.get("groups")
    return groups is None or group in groups


# ----------------------------------------------------------------------------- distributed (torchrun)


def _distributed_handle(impl: str, comm: Any, device: str) -> Callable[[Any], Any]:
    """How a torchrun rank makes its world handle for a family."""

    def make(fam: Any) -> Any:
        """The golden Comm, or the kernel's fabric / Comm for this rank."""
        if impl == "golden" or fam.family == "markov_fused":
            return comm
        from harness.families import NotAvailable  # noqa: PLC0415

        try:
            from kernels import fabric  # noqa: PLC0415

            return fabric.SymmetricFabric(comm.group, device=device)
        except Exception as exc:  # noqa: BLE001
            raise NotAvailable(f"kernels.fabric.SymmetricFabric: {type(exc).__name__}: {exc}") from exc

    return make


def run_distributed(job: dict) -> int:
    """Run the job's cases as this torchrun rank; return the process exit code."""
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    from harness.dist_comm import DistComm  # noqa: PLC0415

    mark_startup("torch")
    backend = job.get("backend", "gloo")
    device = "cpu"
    if backend == "nccl" or job.get("impl") == "kernel":
        if torch.cuda.is_available():
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local % torch.cuda.device_count())
            device = f"cuda:{torch.cuda.current_device()}"
    if job.get("first_rank") is not None:
        # several nodes: the rank follows --node-rank, not the order c10d met the agents in (Rendezvous.first_rank)
        os.environ["RANK"] = str(int(job["first_rank"]) + int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=timedelta(seconds=float(job.get("collective_timeout_s", 300))))
    mark_startup("joined")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        tp = int(job.get("tp") or world)
        if world % tp:
            raise ValueError(f"--tp {tp} must divide the world size {world}")
        group = rank // tp if tp < world else None
        pg = None
        if group is not None:
            # Only the group's own ranks make it (local synchronization): making every group on every rank
            # is a store barrier over the whole world per group, world^2 / tp store operations in all.
            pg = dist.new_group(list(range(group * tp, (group + 1) * tp)), use_local_synchronization=True)
        mark_startup("grouped")
        comm = DistComm(pg, device=device if backend == "nccl" else "cpu")
        for spec in job["cases"]:
            if not runs_in_group(spec, group):
                continue
            res = run_case(spec, rank=rank, group_rank=comm.rank, tp=tp, group=group, impl=job.get("impl", "golden"),
                           run_dir=job["run_dir"], make_handle=_distributed_handle(job.get("impl", "golden"), comm, device),
                           store=job.get("store"), cache_dir=job.get("cache_dir"), job_index=job.get("job"))
            if res.get("abandon"):
                sys.stdout.flush()
                os._exit(ABANDON_EXIT)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------- virtual (one process)


def _unavailable_handle(reason: str) -> Callable[[Any], Any]:
    """A handle factory that reports the kernel path as not available, with ``reason``."""

    def make(fam: Any) -> Any:
        """Raise NotAvailable with the reason."""
        from harness.families import NotAvailable  # noqa: PLC0415

        raise NotAvailable(reason)

    return make


def run_virtual(job: dict, world: int) -> int:
    """Run the job's cases with ``world`` ranks as threads of this process (one GPU, or the CPU for golden)."""
    from golden.comm import ThreadWorld  # noqa: PLC0415

    impl = job.get("impl", "golden")
    tp = int(job.get("tp") or world)
    if world % tp:
        raise ValueError(f"--tp {tp} must divide the world size {world}")
    timeout_s = float(job.get("collective_timeout_s", 300))
    for spec in job["cases"]:
        for g in range(world // tp):
            group = g if tp < world else None
            if not runs_in_group(spec, group):
                continue

            def body(comm: Any, make_handle: Callable[[Any], Any]) -> dict:
                """One virtual rank's run of the case."""
                return run_case(spec, rank=g * tp + comm.rank, group_rank=comm.rank, tp=tp, group=group,
                                impl=impl, run_dir=job["run_dir"], make_handle=make_handle, store=job.get("store"),
                                cache_dir=job.get("cache_dir"), job_index=job.get("job"))

            fabrics, reason = None, ""
            if impl == "kernel":
                try:
                    import torch  # noqa: PLC0415
                    from kernels.fabric import VirtualFabric  # noqa: PLC0415

                    if not torch.cuda.is_available():
                        raise RuntimeError("no CUDA device")
                    fabrics = VirtualFabric.create(tp, "cuda", timeout_s=timeout_s)
                except Exception as exc:  # noqa: BLE001 - reported per rank as not available
                    reason = f"kernels.fabric.VirtualFabric: {type(exc).__name__}: {exc}"
            if fabrics is not None:
                from kernels.fabric import VirtualFabric  # noqa: PLC0415

                results = VirtualFabric.run(fabrics, lambda fab: body(fab, lambda fam, fab=fab: fab))
            elif impl == "kernel":
                results = ThreadWorld(tp, timeout_s=timeout_s).run(
                    lambda comm: body(comm, _unavailable_handle(reason)))
            else:
                results = ThreadWorld(tp, timeout_s=timeout_s).run(lambda comm: body(comm, lambda fam, c=comm: c))
            if any(r.get("abandon") for r in results):
                return ABANDON_EXIT
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``--job`` (and ``--virtual N``) and run the job."""
    parser = argparse.ArgumentParser(prog="python -m harness.worker", description=__doc__.split("\n")[0])
    parser.add_argument("--job", help="job file written by the launcher (JSON)")
    parser.add_argument("--virtual", type=int, default=0, help="run N ranks as threads of this process")
    parser.add_argument("--standby", metavar="HANDOFF",
                        help="start up now, then take the job named in HANDOFF (harness.standby)")
    args = parser.parse_args(argv)
    if not (args.job or args.standby):
        parser.error("--job or --standby is required")
    started = process_started_at()
    if started is not None:
        mark_startup("process", started)
    mark_startup("worker")
    if args.standby:
        try:
            args.job, args.virtual = standby.await_job(args.standby)
        except standby.NoJob:
            return 0
    job = json.loads(Path(args.job).read_text(encoding="utf-8"))
    # SIGUSR1 dumps every thread's Python stack to <run>/stacks/<pid>.txt: the watchdog asks
    # for it before it ends a job that ran out of time, and the report shows the hung rank's.
    register_worker(job["run_dir"])
    # the launcher writes the job file as it starts the job (a standby process started before it)
    count_start_up_from(Path(args.job).stat().st_mtime, job_only=bool(args.standby))
    if args.virtual:
        return run_virtual(job, args.virtual)
    return run_distributed(job)


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    sys.exit(record(main)())
