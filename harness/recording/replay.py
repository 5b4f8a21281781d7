"""``python -m harness replay --bundle DIR``: replay a recorded world offline and say where it went wrong.

``DIR`` is a world recording (``harness.recording.writer``) or a directory of them
(one per family, as ``examples/decode_loop.py --record`` writes); each is
replayed in turn. For one recording:

1. ``harness.recording.world.load_world`` reads and checks every file (exit
   2 on a bad or tampered recording, before anything runs);
2. ``disagreements`` compares the ranks' recorded calls: the rank, the
   launch and every field (rows, a parameter, an input's shape or bits)
   where a rank's call is not its peers', and ranks that made a different
   number of calls;
3. every rank replays its own recorded calls, from the newest launch at
   which every rank's window starts, in one world of ``--impl`` (golden
   ranks as threads over ``golden.comm.ThreadWorld``, kernels over
   ``kernels.fabric.VirtualFabric``; ``harness.recording.recorder.run_world``), each
   rank's system started at the counters it had before its first replayed
   call. Every collective has the ``--deadline``: a world whose ranks
   disagree fails (a mismatched exchange) or times out (a rank that skipped
   a call leaves its peers waiting) instead of hanging, and the report names
   where each rank was;
4. each replayed call that completed in the recording is compared bit for
   bit with the recorded outputs (and counters, when the system could be
   started at the recorded ones), and with the golden reference (the
   unsharded loop on that rank's inputs).

Kernels replay in a child process per recording (``replay_isolated``): a
kernel that times out writes its ``kernels.diag`` record and traps, which
leaves that process's CUDA context unusable. The child's report carries
the record ("kernel record: rank 0 launch 2: ... wait for rank 1 timed
out"); a child that dies before writing its report, or runs past its
budget, still leaves the recording's own findings (disagreements, ranks
that ended badly) and a ``REPLAY ABORTED`` line, and the next recording
replays in a fresh process.

Exit 0 when every rank's job ended by itself, the ranks agree and every
replay equals the recording and the golden; 1 on any disagreement, failure
or mismatch (each line names the rank and launch), on a rank whose job
ended with an exception, a signal or a kill, and on a recording in which no
rank made a call (nothing replayed is never a pass); 2 on a bad recording
or bad arguments. ``--run-dir``
also writes the report as ``world_replay.json`` there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Sequence

from harness.families import NotAvailable, adapter
from harness.launch.supervision import Supervised
from harness.rank.compare import compare_outputs
from harness.recording.recorder import STATE_PREFIX, _snapshot, run_world, state_tensors
from harness.recording.world import WorldRecording, disagreements, first_line, load_world
from harness.recording.writer import WORLD_MANIFEST
from harness.wire.run_dir import run_dir_lock
from scenarios.bundle import BundleError

ORDERLY_END = "exit"  # what harness.recording.writer writes when the recorded block ended without an exception

DEFAULT_DEADLINE_S = 60.0
CHILD_VAR = "RANKCHECK_REPLAY_CHILD"  # set in the child that replays one recording's kernels
CHILD_START_S = 180.0  # the child's import, CUDA start and kernel compiles, beyond the calls' deadlines


def recordings_under(directory: str | Path) -> list[Path]:
    """The world recordings at ``directory``: itself when it is one, else its subdirectories that are."""
    root = Path(directory)
    if (root / WORLD_MANIFEST).exists():
        return [root]
    found = sorted(p for p in root.iterdir() if (p / WORLD_MANIFEST).exists()) if root.is_dir() else []
    if not found:
        raise BundleError(f"--bundle: {root} holds no {WORLD_MANIFEST} (not a recording, nor a directory of them)")
    return found


def replay_start(world: WorldRecording) -> int:
    """The first launch every rank replays: the newest first launch among the ranks' windows."""
    return max(r.launches[0] for r in world.ranks if r.bundle is not None)


def rank_config(world: WorldRecording, rank: int, start: int, notes: list[str]) -> tuple[dict, bool]:
    """(config starting ``rank``'s system at its counters before launch ``start``, whether counters compare)."""
    fam = adapter(world.family)
    config = fam.config_for(world.manifest["config"], world.world)
    record = world.ranks[rank]
    if record.bundle is None or start == 0:
        return config, True  # the recording began with the job: the recorded config starts it exactly
    index = record.launches.index(start) if start in record.launches else 0
    before = record.entry.get("start_state") or {}
    if index > 0:
        outputs = record.bundle.recorded_outputs(index - 1)
        before = {k[len(STATE_PREFIX):]: int(v) for k, v in outputs.items() if k.startswith(STATE_PREFIX)}
    try:
        config.update(fam.start_config(fam.resume_state(before)))
        return config, True
    except ValueError as exc:
        notes.append(f"rank {rank}: counters not compared (the system cannot start at {before}: {exc})")
        return config, False


def replay_calls(world: WorldRecording, impl: str, deadline_s: float, start: int,
                 configs: list[dict]) -> list[dict]:
    """Replay every rank's calls from launch ``start`` in one world; per rank ``{launch: outputs}``, ``error``, ``at``."""
    first = next(r for r in world.ranks if r.bundle is not None)

    def body(system: Any, rank: int) -> dict:
        """Replay this rank's calls; a failure ends the rank's replay and is kept with its launch."""
        record, done = world.ranks[rank], {"produced": {}, "error": None, "at": None}
        for launch in [n for n in record.launches if n >= start] if record.bundle is not None else []:
            done["at"] = launch
            inputs, params = record.call(launch)
            try:
                outputs = {k: v.cpu() for k, v in
                           _snapshot(system.launch(inputs, params), f"rank {rank} launch {launch} outputs").items()}
            except Exception as exc:  # noqa: BLE001 - reported with the rank and launch
                done["error"] = f"{type(exc).__name__}: {first_line(exc)[:400]}{kernel_record_text(system)}"
                return done
            outputs.update(state_tensors(system.state()))
            done["produced"][launch] = outputs
        done["at"] = None
        return done

    return run_world(world.family, impl, world.world, first.bundle.recorded_static(), configs[0], body,
                     timeout_s=deadline_s, rank_configs=configs)


def kernel_record_text(system: Any) -> str:
    """``"; kernel record: ..."`` when the system's kernels wrote a diagnostic record before a trap, else ``""``."""
    try:
        from kernels.diag import record_of  # noqa: PLC0415 - imports CuTe DSL: only a kernel replay's record needs it

        record = record_of(system)
        report = record.read() if record is not None else None
    except Exception as exc:  # noqa: BLE001 - a torn or foreign record is said, not fatal
        return f"; kernel record unreadable: {exc}"
    return f"; kernel record: {report.describe()}" if report is not None else ""


def mismatch_line(against: str, rank: int, launch: int, comparison: Any) -> list[str]:
    """One line for a call whose comparison failed (how many elements, the first of them); none when it passed."""
    if comparison.ok:
        return []
    first = comparison.first[0].describe() if comparison.first else ""
    return [f"MISMATCH: rank {rank} launch {launch}: replay differs from {against} in {comparison.mismatch_count} "
            f"elements; first: {first}"]


def compare_with_recording(world: WorldRecording, results: list[dict], counters: list[bool]) -> list[str]:
    """Lines naming each rank and launch whose replay differs from the recorded outputs (empty: identical)."""
    lines = []
    for record, result, with_counters in zip(world.ranks, results, counters):
        for launch, produced in sorted(result["produced"].items()):
            if not record.completed(launch):
                lines.append(f"rank {record.rank} launch {launch}: completed in the replay, but was in flight when "
                             f"the recording ended ({record.ended})")
                continue
            recorded = record.bundle.recorded_outputs(record.launches.index(launch))
            names = [k for k in sorted(recorded) if with_counters or not k.startswith(STATE_PREFIX)]
            comparison = compare_outputs(produced, recorded, rank=record.rank, names=names, launch=launch)
            lines += mismatch_line("the recording", record.rank, launch, comparison)
    return lines


def compare_with_golden(world: WorldRecording, results: list[dict], configs: list[dict]) -> tuple[list[str], int]:
    """(lines naming each rank and launch whose replay differs from the golden reference, calls compared)."""
    fam = adapter(world.family)
    static = next(r for r in world.ranks if r.bundle is not None).bundle.recorded_static()
    lines, compared = [], 0
    for record, result, config in zip(world.ranks, results, configs):
        for launch, produced in sorted(result["produced"].items()):
            inputs, params = record.call(launch)
            reference = fam.reference(static, config, inputs, params)
            comparison = compare_outputs(produced, reference, rank=record.rank, launch=launch,
                                         names=fam.compared_outputs(reference), axes=fam.output_axes)
            compared += 1
            lines += mismatch_line("the golden", record.rank, launch, comparison)
    return lines, compared


def offline_report(directory: Path, world: WorldRecording) -> dict:
    """What the recording says without running anything: each rank's window, disagreements, ranks that ended badly."""
    notes = [f"rank {r.rank}: {len(r.launches)} recorded calls (launches {r.launches[0]}..{r.launches[-1]})"
             f"{', the last in flight' if r.entry.get('in_flight') else ''}; {r.entry.get('calls_made')} made; "
             f"recording ended: {r.ended}" if r.bundle is not None else
             f"rank {r.rank}: made no call; recording ended: {r.ended}" for r in world.ranks]
    findings = [f"DISAGREEMENT: {line}" for line in disagreements(world)]
    # a rank whose job did not end by itself is a finding of its own (the replay may still tell why)
    findings += [f"RANK ENDED: rank {r.rank}: {r.ended}" for r in world.ranks if r.ended != ORDERLY_END]
    if all(r.bundle is None for r in world.ranks):
        findings.append("NOTHING RECORDED: no rank made a call, so nothing was replayed")
    return {"recording": str(directory), "family": world.family, "world": world.world,
            "findings": findings, "notes": notes}


def replay_one(directory: Path, impl: str, deadline_s: float) -> dict:
    """Replay the world recorded at ``directory``; the report: ``findings`` (each names a rank and launch) and ``notes``."""
    world = load_world(directory)
    report = offline_report(directory, world)
    if all(r.bundle is None for r in world.ranks):
        return report
    findings, notes = report["findings"], report["notes"]
    start = replay_start(world)
    configured = [rank_config(world, r, start, notes) for r in range(world.world)]
    configs, counters = [c for c, _ in configured], [k for _, k in configured]
    try:
        results = replay_calls(world, impl, deadline_s, start, configs)
    except Exception as exc:  # noqa: BLE001 - the world itself failed (its teardown after a trap): say so, keep the rest
        findings.append(f"REPLAY FAILED: the replayed world ended with {type(exc).__name__}: {first_line(exc)[:300]}")
        return report | {"impl": impl}
    for record, result in zip(world.ranks, results):
        if result["error"] is not None:
            findings.append(f"REPLAY FAILED: rank {record.rank} at launch {result['at']}: {result['error']}")
    compared = 0
    try:
        findings += compare_with_recording(world, results, counters)
        golden, compared = compare_with_golden(world, results, configs)
        findings += golden
    except Exception as exc:  # noqa: BLE001 - after a kernel trap the device is gone; the findings so far stand
        findings.append(f"COMPARE FAILED: {type(exc).__name__}: {first_line(exc)[:300]}")
    replayed = sum(len(r["produced"]) for r in results)
    notes.append(f"replayed from launch {start} with impl {impl}: {replayed} calls completed over "
                 f"{world.world} ranks; {compared} compared with the golden reference")
    return report | {"impl": impl}


def isolated_budget_s(world: WorldRecording, deadline_s: float) -> float:
    """The child's time: a deadline per recorded call of the longest rank, plus one, plus the start and compile."""
    calls = max((len(r.launches) for r in world.ranks if r.bundle is not None), default=0)
    return deadline_s * (calls + 1) + CHILD_START_S


def child_argv(directory: Path, deadline_s: float, run_dir: str) -> list[str]:
    """The command that replays one recording's kernels in a child and writes its report into ``run_dir``."""
    return [sys.executable, "-m", "harness", "replay", "--bundle", str(directory), "--impl", "kernel",
            "--deadline", str(deadline_s), "--run-dir", run_dir]


def replay_isolated(directory: Path, deadline_s: float) -> dict:
    """Replay one recording's kernels in a child process: a trap there ends the child, not this report.

    The child writes its report as it would in-process; when it ends
    without one (a kernel trap can abort a process at exit or before) or
    runs past its budget, the report is the recording's offline findings
    plus a ``REPLAY ABORTED`` finding with the child's last lines.
    """
    world = load_world(directory)  # a bad recording is refused here, before any process starts
    adapter(world.family).check_available("kernel")  # no GPU or no CuTe DSL: NotAvailable, exit 2
    budget = isolated_budget_s(world, deadline_s)
    with tempfile.TemporaryDirectory(prefix="rankcheck-replay-") as tmp:
        log = Path(tmp) / "replay.log"
        with open(log, "wb") as out:
            tree = Supervised(child_argv(directory, deadline_s, tmp), env={**os.environ, CHILD_VAR: "1"}, stdout=out, stderr=subprocess.STDOUT,
                              stacks_dir=tmp)
            outcome = tree.wait(budget)
        written = Path(tmp) / "world_replay.json"
        if written.exists():
            report = json.loads(written.read_text(encoding="utf-8"))[0]
            report["notes"].append(f"kernels replayed in a child process (exit {outcome.returncode})")
            return report
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-6:]
    report = offline_report(directory, world)
    why = f"ran past its {budget:.0f} s" if outcome.timed_out else f"ended with exit {outcome.returncode}"
    report["findings"].append(f"REPLAY ABORTED: the kernel replay process {why} before it wrote its report; "
                              f"its last lines: {' | '.join(line.strip() for line in tail)[:800]}")
    return report


def run_bundle_replay(bundle: str, *, impl: str | None = None, launcher: str = "auto",
                      deadline: float | None = None, run_dir: str | None = None) -> int:
    """Replay every recording under ``bundle`` and print the report; return 0 / 1 (findings) / 2 (bad recording)."""
    # another run's directory is refused (exit 2) before any replay, never overwritten
    with run_dir_lock(Path(run_dir)) if run_dir else nullcontext():
        return bundle_replay_in(bundle, impl=impl, launcher=launcher, deadline=deadline, run_dir=run_dir)


def bundle_replay_in(bundle: str, *, impl: str | None, launcher: str, deadline: float | None,
                     run_dir: str | None) -> int:
    """``run_bundle_replay`` once its run directory (if any) is held."""
    if launcher not in ("auto", "virtual"):
        print(f"replay: --launcher {launcher}: a recorded world replays in one process (auto or virtual)")
        return 2
    try:
        impl, deadline = impl or "golden", deadline or DEFAULT_DEADLINE_S
        isolate = impl == "kernel" and not os.environ.get(CHILD_VAR)
        reports = [replay_isolated(path, deadline) if isolate else replay_one(path, impl, deadline)
                   for path in recordings_under(bundle)]
    except (BundleError, NotAvailable, ValueError, TypeError) as exc:
        print(f"replay --bundle: {type(exc).__name__}: {exc}")
        return 2
    for report in reports:
        print(f"recording {report['recording']} ({report['family']}):")
        for line in report["notes"]:
            print(f"  {line}")
        for line in report["findings"]:
            print(f"  {line}")
        print(f"  verdict: {'FAILED' if report['findings'] else 'ok'} ({len(report['findings'])} findings)")
    if run_dir:
        (Path(run_dir) / "world_replay.json").write_text(json.dumps(reports, indent=1), encoding="utf-8")
    return 1 if any(r["findings"] for r in reports) else 0


__all__: Sequence[str] = ("run_bundle_replay", "replay_one", "recordings_under")
