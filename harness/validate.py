"""``harness validate`` (and ``make validate``): every scenario of the machine's size class at every world.

The launcher is resolved first (``auto`` picks from the GPUs present) and
named in the report header, with what needs a GPU when none is here. Then,
for each world size (the scenarios' own ``worlds``, or ``--world``), the
cases that list it run through the launcher's ``JobRunner``: batched into one
job where they cannot hang, alone where they may. With ``--tp T`` every job
has ``world`` ranks split into ``world / T`` TP groups side by side, each
validated on its own (cases run at TP size T).

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
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.families.catalog import Case, discover, select
from harness.launchers import argv_builder, gpu_count, resolve, settings_for
from harness.launchers.jobs import JobRunner, Rendezvous
from harness.report import Report
from harness.worker import stored_case


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
    startup: float = 90.0
    scenario_root: str | None = None
    impl: str | None = None
    store: str | None = "check"
    rendezvous: Rendezvous = field(default_factory=Rendezvous)


def default_run_dir() -> Path:
    """``runs/<UTC timestamp>`` under the repository root."""
    return Path(__file__).resolve().parents[1] / "runs" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def plan_worlds(cases: Sequence[Case], req: ValidateRequest) -> list[tuple[int, list[Case]]]:
    """(world, cases) pairs to run: each case at every world it lists (filtered by --world), or at --tp."""
    if req.tp is not None:
        if req.tp < 1:
            raise ValueError(f"--tp must be >= 1, got {req.tp}")
        worlds = list(req.worlds or [])
        if not worlds:
            raise ValueError("--tp needs --world (the total rank count, a multiple of --tp)")
        out = []
        for world in worlds:
            if world % req.tp:
                raise ValueError(f"--tp {req.tp} must divide --world {world}")
            out.append((world, [c for c in cases if req.tp in c.worlds]))
        return out
    worlds = sorted({w for c in cases for w in c.worlds})
    if req.worlds:
        bad = [w for w in req.worlds if w < 1]
        if bad:
            raise ValueError(f"--world must be >= 1, got {bad}")
        if req.scenarios:
            idle = [c for c in cases if not set(c.worlds) & set(req.worlds)]
            if idle:
                raise ValueError("--world: " + "; ".join(f"{c.key} runs at {list(c.worlds)}" for c in idle) +
                                 f", not at {list(req.worlds)}")
        worlds = [w for w in worlds if w in req.worlds]
    rdzv = req.rendezvous
    if rdzv.nnodes > 1 and rdzv.nproc_per_node:
        worlds = [w for w in worlds if w == rdzv.nnodes * rdzv.nproc_per_node]
    return [(w, [c for c in cases if w in c.worlds]) for w in worlds]


def run_validate(req: ValidateRequest, *, stream=None) -> int:
    """Run the requested validation and return the exit code (0: nothing failed)."""
    gpus = gpu_count()
    launcher, why = resolve(req.launcher, gpus)
    size = req.size or ("all" if launcher != "cpu" and gpus else "cpu")
    cases = select(discover(req.scenario_root), family=req.family, names=list(req.scenarios or []) or None,
                   size=size)
    pairs = plan_worlds(cases, req)
    run_dir = Path(req.run_dir) if req.run_dir else default_run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    junit = req.junit or str(run_dir / "report.xml")
    json_path = req.json or str(run_dir / "report.json")
    total = sum(len(cs) * (w // req.tp if req.tp else 1) for w, cs in pairs)
    impl = settings_for(launcher, run_dir, max([w for w, _ in pairs] or [1]), gpus, impl=req.impl).impl
    header = (f"# rankcheck validate: {why}\n# system under test: {impl} implementation; size class {size}; "
              f"{len(cases)} scenario(s); "
              f"worlds {[w for w, _ in pairs]}" + (f"; tp {req.tp}" if req.tp else "") +
              f"\n# run dir {run_dir}; junit {junit}; json {json_path}")
    unstored = sorted({c.key for _, cs in pairs for c in cs if c.outcomes == ("golden",) and not stored_case(c)})
    if req.store and unstored:
        header += (f"\n# stored bits: {len(unstored)} gpu-size scenario(s) skipped (not in golden/data: a realistic-size "
                   f"reference takes minutes on a CPU; their check is the golden reference recomputed in this run)")
    job_numbers = itertools.count()
    with Report(header=header, junit_path=junit, json_path=json_path, total=total, stream=stream) as report:
        for world, world_cases in pairs:
            if not world_cases:
                continue
            settings = settings_for(launcher, run_dir, world, gpus, per_launch_s=req.deadline,
                                    startup_s=req.startup, tp=req.tp, impl=req.impl, rendezvous=req.rendezvous,
                                    store=req.store)
            JobRunner(settings, argv_builder(launcher), report.add, report.note, job_numbers).run(world_cases, world)
    return report.exit_code()


__all__ = ["ValidateRequest", "default_run_dir", "plan_worlds", "run_validate"]
