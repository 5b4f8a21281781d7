"""``harness replay SCENARIO``: one scenario, one world, verbose per-rank diagnostics.

For a developer reproducing a hang or a disagreement. The scenario runs
once through the chosen launcher (as ``validate`` would run it), optionally
with extra injections given on the command line (``--inject
hang:rank=1,launch=2``; ``harness.launch.inject_option``): each is checked first
against the scenario at the world being run, and an error names the
``--inject`` argument and that world. The run then uses a copy of the
scenario file in the run directory with ``worlds`` narrowed to the world
being run and the injections added. Afterwards every rank's
progress records are printed side by side (one column per rank: event,
launch, parameters, state), then each rank's result (error, first
mismatches), the watchdog's diagnosis and any kernel diagnostic records,
and last the run's ``# Result`` line once more (the report's verdict, whose
exit code the command returns), so the verdict is the last line here too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from harness.launch import flight_evidence
from harness.families.catalog import discover_each, select
from harness.launch import records
from harness.launch.diagnosis import diagnose, kernel_diag_records
from harness.launch.inject_option import checked_injections, write_injected_copy
from harness.validate import ValidateRequest, run_validate
from harness.wire.case_files import CaseId, default_run_dir
from harness.wire.run_dir import run_dir_lock


def _cell(record: dict) -> str:
    """One progress record as a short table cell."""
    launch = record.get("launch")
    where = f" L{launch}" if launch is not None and launch >= 0 else ""
    params = record.get("params") or {}
    state = record.get("state") or {}
    extra = record.get("error") or ""
    text = f"{record.get('event')}{where}"
    if params:
        text += " " + json.dumps(params, sort_keys=True)
    if state:
        text += " " + json.dumps(state, sort_keys=True)
    if extra:
        text += f" {extra[:120]}"
    return text


def side_by_side(progress: dict[int, list[dict]]):
    """A rich table: one column per rank, one row per record index."""
    table = Table(title="progress records (one column per rank)")
    table.add_column("#")
    for rank in sorted(progress):
        table.add_column(f"rank {rank}")
    depth = max((len(v) for v in progress.values()), default=0)
    for i in range(depth):
        table.add_row(str(i), *[_cell(progress[r][i]) if i < len(progress[r]) else "" for r in sorted(progress)])
    return table


def run_replay(scenario: str, *, world: int | None = None, launcher: str = "auto", inject: Sequence[str] = (),
               run_dir: str | None = None, deadline: float | None = None, impl: str | None = None,
               scenario_root: str | None = None, allow_unavailable: bool = False) -> int:
    """Run one scenario verbosely and print the per-rank diagnostics; return the validate exit code."""
    [case] = select(discover_each(scenario_root)[0], names=[scenario], option="scenario")  # bad files: run_validate names them
    world = world or case.worlds[0]
    if world not in case.worlds:
        raise ValueError(f"--world: {case.key} runs at {list(case.worlds)}, got {world}")
    extra = checked_injections(case, inject, world)
    out = Path(run_dir) if run_dir else default_run_dir()
    with run_dir_lock(out):  # held across the validation (re-entrant) and the read-back of its records
        code = run_validate_in(out, case, world, inject, extra, launcher=launcher, deadline=deadline, impl=impl,
                               scenario_root=scenario_root, allow_unavailable=allow_unavailable)
        print_diagnostics(out, case, world)
    return code


def run_validate_in(out: Path, case, world: int, inject: Sequence[str], extra: list, *, scenario_root: str | None,
                    **options) -> int:
    """Validate ``case`` at ``world`` in run directory ``out`` (with the injected copy when ``extra`` plants faults)."""
    if extra:
        write_injected_copy(case, extra, inject, out / "scenario", worlds=[world])
    root = str(out / "scenario") if extra else scenario_root
    return run_validate(ValidateRequest(scenarios=[case.key], worlds=[world], size="all", run_dir=str(out),
                                        scenario_root=root, store=False, **options))


def print_diagnostics(out: Path, case, world: int) -> None:
    """Print ``case``'s ranks' progress side by side, each rank's result, the hang diagnosis, then the report's result line."""
    console = Console()
    case_id = CaseId(case.family, case.name, world, None, world)
    progress = records.read_group_progress(out, case_id)
    console.print(side_by_side(progress))
    results = records.read_results(out, case_id)
    for rank in range(world):
        res = results.get(rank)
        if res is None:
            console.print(f"rank {rank}: no result (ended before writing it)", markup=False)
            continue
        comp = res.comparison or {}
        line = f"rank {rank}: {res.status}, {res.launches_done} launches, " \
               f"{comp.get('mismatch_count', 0)} mismatching elements"
        if res.error:
            line += f"; {res.error['type']}: {res.error['message'][:300]}"
        console.print(line, markup=False)
        for m in comp.get("first", [])[:4]:
            console.print(f"    {m['output']} {m['where']} got {m['actual_hex']} ({m['actual']}) "
                          f"expected {m['expected_hex']} ({m['expected']})", markup=False)
    kernel = kernel_diag_records(case_id.directory(out))
    diagnosis = flight_evidence.attach(diagnose(progress, kernel_records=kernel), case_id.directory(out))
    console.print("diagnosis: " + diagnosis.text, markup=False)
    for rec in kernel:
        console.print(f"kernel record: {rec}", markup=False)
    console.print(result_line(out / "report.json"), markup=False, soft_wrap=True)


def result_line(report_path: Path) -> str:
    """The report's ``# Result : ...`` line, read from its JSON summary (what the footer printed)."""
    try:
        summary = json.loads(report_path.read_text(encoding="utf-8")).get("summary") or {}
    except (OSError, ValueError):
        return f"# Result : (no report at {report_path})"
    return f"# Result : {summary.get('result', '?')}"
