"""The torchrun bench mode: a case timed by one process per rank, started and ended by the harness.

A case declared with ``launcher="torchrun"`` (``harness.bench.registry``)
is run by ``run_case``: ``python -m torch.distributed.run --standalone
--nproc-per-node N -m harness.bench.torchrun_rank`` under the harness's
watchdog (``harness.launch.supervision.Supervised``: a deadline over the whole tree,
every process group it started ended and verified gone, whatever happens).
Its environment keeps NVLink multicast off (``harness.launch.launchers.MULTICAST_OFF``)
and picks the backend as the validation launchers do: NCCL where every rank
has its own GPU, gloo with ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``
where ranks share one (those times prove the path; they are not NVLink's).

Each rank writes ``rank<k>.json`` (``harness.bench.torchrun_rank``); the
verdict (``Spawned``) is read from them and the exit status of the tree:

- ``entries``: rank 0's measured results entries, merged by the caller into
  the bench document as cases of their own (with rank 0's device and machine
  figures when the run had no in-process case);
- ``unavailable``: why it could not run here (every rank said not available,
  e.g. no GPU), or an implementation that did not run (a peer is
  ``optional``), with its ``family``, ``name`` and ``params`` so that the
  summary puts the reason in the cell it would have filled;
- ``failed``: a rank's error, a rank without a result, the deadline, or a
  required implementation (the kernel, the baseline) that failed on a rank
  while the others were measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from harness.bench.console import case_line
from harness.bench.results import utc_now
from harness.bench.runner import new_document
from harness.bench.torchrun_rank import BACKEND_VAR
from harness.launch.jobs import REPO_ROOT, python
from harness.launch.launchers import GLOO_LAZY_INIT, MULTICAST_OFF, gpu_count
from harness.launch.supervision import Supervised

DEFAULT_DEADLINE_S = 300.0
LOG_TAIL = 2000


@dataclass
class Spawned:
    """What one torchrun case gave: rank 0's entries and figures, what did not run and why, failures."""

    entries: list = field(default_factory=list)
    device: dict | None = None
    machine: dict | None = None
    unavailable: list = field(default_factory=list)
    failed: list = field(default_factory=list)


def spawn_env(world: int, gpus: int | None = None) -> dict:
    """The ranks' environment: multicast off, and the backend (NCCL with a GPU per rank, else gloo sharing GPUs)."""
    gpus = gpu_count() if gpus is None else gpus
    env = dict(os.environ)
    env.update(MULTICAST_OFF)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // world)))
    if gpus >= world:
        env[BACKEND_VAR] = "nccl"
    else:
        env.update({BACKEND_VAR: "gloo", "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1", GLOO_LAZY_INIT: "1"})
    return env


def spawn_argv(key: str, world: int, run_dir: Path, *, warmup: int, reps: int) -> list[str]:
    """The torchrun command line of one case."""
    return [python(), "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", str(world),
            "--max-restarts", "0", "--monitor-interval", "0.5",
            "-m", "harness.bench.torchrun_rank", "--case", key, "--dir", str(run_dir),
            "--warmup", str(warmup), "--reps", str(reps)]


def _read_ranks(run_dir: Path, world: int) -> dict[int, dict]:
    """The rank results present in ``run_dir`` (a rank that wrote none is absent)."""
    found = {}
    for rank in range(world):
        path = run_dir / f"rank{rank}.json"
        if path.exists():
            found[rank] = json.loads(path.read_text())
    return found


def verdict(key: str, ranks: dict[int, dict], world: int, *, rc: int | None, timed_out: bool, deadline_s: float,
            log_tail: str = "", leftovers: Sequence[int] = ()) -> Spawned:
    """The outcome of one torchrun case from its rank results and the tree's exit (pure: the tests call it)."""
    out = Spawned()
    if leftovers:
        out.failed.append({"case": key, "error": f"processes {sorted(leftovers)} outlived the tree's end"})
    if timed_out:
        out.failed.append({"case": key, "error": f"torchrun: no result within {deadline_s:.0f} s; its processes "
                                                  f"were ended{(': ' + log_tail[-400:]) if log_tail else ''}"})
        return out
    statuses = {rank: result.get("status") for rank, result in ranks.items()}
    if len(ranks) == world and set(statuses.values()) == {"not_available"}:
        whys = sorted({result.get("why", "?") for result in ranks.values()})
        out.unavailable.append({"case": key, "optional": False, "why": "; ".join(whys)})
        return out
    for rank in range(world):
        result = ranks.get(rank)
        if result is None:
            out.failed.append({"case": key, "error": f"rank {rank} wrote no result (torchrun exit {rc})"
                                                     + (f": {log_tail[-400:]}" if log_tail else "")})
        elif result.get("status") == "failed":
            out.failed.append({"case": key, "error": f"rank {rank}: {result.get('error')}",
                               "traceback": result.get("traceback", "")})
        elif result.get("status") == "not_available":
            out.failed.append({"case": key, "error": f"rank {rank} not available ({result.get('why')}) while others ran"})
    first = ranks.get(0, {})
    if first.get("status") == "measured":
        out.entries, out.device, out.machine = first["entries"], first["device"], first["machine"]
        family = key.split("/", 1)[0]
        out.unavailable += [{"case": f"{key}: {item['name']}", "optional": item["optional"], "why": item["why"],
                             "family": family, "name": item["name"], "params": item.get("params", {})}
                            for item in first.get("unavailable", [])]
    for rank, result in sorted(ranks.items()):
        out.failed += [{"case": f"{key}: {item['name']}", "error": f"rank {rank}: {item['why']}",
                        "traceback": item.get("traceback", "")}
                       for item in result.get("failed", []) if result.get("status") == "measured"]
    if not out.failed and rc not in (0, None):
        out.failed.append({"case": key, "error": f"torchrun exited {rc} though every rank wrote a result"})
    return out


def run_case(case, *, warmup: int, reps: int, deadline_s: float = DEFAULT_DEADLINE_S, gpus: int | None = None) -> Spawned:
    """Run torchrun case ``case`` under the watchdog; every process it started is gone when this returns."""
    with tempfile.TemporaryDirectory(prefix="rankcheck-bench-torchrun-") as tmp:
        run_dir = Path(tmp)
        log_path = run_dir / "torchrun.log"
        with open(log_path, "w") as log:
            tree = Supervised(spawn_argv(case.key, case.world, run_dir, warmup=warmup, reps=reps),
                              env=spawn_env(case.world, gpus), cwd=str(REPO_ROOT), stdout=log,
                              stderr=subprocess.STDOUT)
            outcome = tree.wait(deadline_s)
        tail = log_path.read_text(errors="replace")[-LOG_TAIL:]
        return verdict(case.key, _read_ranks(run_dir, case.world), case.world, rc=outcome.returncode,
                       timed_out=outcome.timed_out, deadline_s=deadline_s, log_tail=tail, leftovers=outcome.leftovers)


def run_spawned(cases: Sequence, document: dict | None, *, command: Sequence[str], settings: dict,
                selected: Sequence[str], failed: Sequence[dict], say=print,
                on_document: Callable[[dict], None] = lambda document: None) -> tuple[dict | None, list]:
    """Run each torchrun case in turn and merge it into ``document`` (made from rank 0's figures when None).

    Returns the document (what did not run in its ``not_available`` and
    ``failed``) and, when there is none (nothing measured anywhere), the
    failures it would have held; every outcome is also told through ``say``,
    and ``on_document`` gets the document as soon as it exists (an interrupt
    later still reports the cases merged so far).
    """
    pending_unavailable, pending_failed = [], list(failed)
    for case in cases:
        say(f"bench: torchrun {case.key}: {case.world} processes ...")
        spawned = run_case(case, warmup=settings["warmup"], reps=settings["reps"])
        if document is None and spawned.machine is not None:
            document = new_document(command, utc_now(), spawned.device, spawned.machine, settings, selected,
                                    pending_failed)
            document.setdefault("not_available", []).extend(pending_unavailable)
            pending_failed, pending_unavailable = [], []
            on_document(document)
        (document["failed"] if document is not None else pending_failed).extend(spawned.failed)
        (document.setdefault("not_available", []) if document is not None else pending_unavailable).extend(
            spawned.unavailable)
        for entry in spawned.entries:
            document["cases"].append(entry)
            say(case_line(document, entry))
        for item in spawned.unavailable:
            say(f"bench: {item['case']}: not available: {item['why']}")
        for item in spawned.failed:
            say(f"bench: {item['case']}: FAILED: {item['error']}")
    if document is None:
        return None, pending_failed
    document["status"] = "complete"
    return document, []
