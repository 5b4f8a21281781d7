"""``python -m harness replay --bundle DIR``: replay a recorded world offline and say where it went wrong.

``DIR`` is a world recording (``harness.recording.writer``: ``rankcheck.recording``
of public kernel objects or of family systems, or ``harness record capture``)
or a directory of them; each is replayed in turn. For one recording:

1. ``harness.recording.world.load_world`` reads and checks every file (exit
   2 on a bad or tampered recording, or one in an older format, before
   anything runs);
2. ``divergences`` compares the ranks' recorded calls: the first call where a
   rank's call is not its peers' (object, method, plain arguments, tensor
   shapes and the bits every rank passes alike), ranks that made fewer calls
   and ranks whose last call never returned; each names the rank, the call
   number, the object and method and the flight recorder's launch
   (``first`` in the report: the offline counterpart of the live
   ``kernels.flight`` finding);
3. every rank rebuilds its objects (``harness.recording.rebuild``: golden
   stand-ins over ``golden.comm.ThreadWorld``, or kernel classes over
   ``kernels.fabric.VirtualFabric``; family systems through their adapter)
   and makes its recorded calls again, from the newest call number at which
   every rank's window starts, ranks as threads of one world (the calls are
   collective). Every collective has the ``--deadline``: a world whose ranks
   disagree fails (a mismatched exchange) or times out (a rank that skipped
   a call leaves its peers waiting) instead of hanging, and the report names
   where each rank was;
4. each replayed call that completed in the recording is compared bit for
   bit with it (``harness.rank.compare``, no tolerance): the returned
   tensors, every tensor argument after the call (the recorded outputs
   written in place, the others unchanged), the counters where the rebuilt
   object started at the recorded ones, and the flight launches the call
   used; a family system's calls also with the golden reference (the
   unsharded loop on that rank's inputs).

Kernels replay in a child process per recording (``replay_isolated``): a
kernel that times out writes its ``kernels.diag`` record and traps, which
leaves that process's CUDA context unusable. The child's report carries
the record ("kernel record: rank 0 launch 2: ... wait for rank 1 timed
out"); a child that dies before writing its report, or runs past its
budget, still leaves the recording's own findings (divergences, ranks that
ended badly) and a ``REPLAY ABORTED`` line, and the next recording replays
in a fresh process.

Exit 0 when every rank's job ended by itself, the ranks agree and every
replay equals the recording (and the golden); 1 on any divergence, failure
or mismatch (each line names the rank and call), on a rank whose job ended
with an exception, a signal or a kill, and on a recording in which no rank
made a call (nothing replayed is never a pass); 2 on a bad recording, one in
an older format, or bad arguments. ``--run-dir`` also writes the report as
``world_replay.json`` there.
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
from harness.rank.compare import Comparison, Mismatch, compare_outputs
from harness.recording.rebuild import check_available, replay_rank, run_world
from harness.recording.recorder import RETURN, STATE_PREFIX
from harness.recording.targets import scratch
from harness.recording.world import WorldRecording, divergences, first_line, load_world
from harness.recording.values import decode_plain
from harness.recording.writer import WORLD_MANIFEST
from harness.wire.run_dir import run_dir_lock
from scenarios.bundle import MANIFEST, BundleError

ORDERLY_END = "exit"  # what harness.recording.writer writes when the recorded block ended without an exception

DEFAULT_DEADLINE_S = 60.0
CHILD_VAR = "RANKCHECK_REPLAY_CHILD"  # set in the child that replays one recording's kernels
CHILD_START_S = 180.0  # the child's import, CUDA start and kernel compiles, beyond the calls' deadlines


def recordings_under(directory: str | Path) -> list[Path]:
    """The world recordings at ``directory``: itself when it is one, else its subdirectories that are."""
    root = Path(directory)
    if (root / WORLD_MANIFEST).exists():
        return [root]
    if (root / MANIFEST).exists():
        raise BundleError(f"--bundle: {root} is a single bundle ({MANIFEST} without {WORLD_MANIFEST}), the format "
                          f"an older `harness record capture` wrote; capture the scenario again "
                          f"(`python -m harness record capture ...` writes a world recording) and replay that")
    found = sorted(p for p in root.iterdir() if (p / WORLD_MANIFEST).exists()) if root.is_dir() else []
    if not found:
        raise BundleError(f"--bundle: {root} holds no {WORLD_MANIFEST} (not a recording, nor a directory of them)")
    return found


def replay_start(world: WorldRecording) -> int:
    """The first call every rank replays: the newest first call among the ranks' windows."""
    return max(r.calls[0] for r in world.ranks if r.bundle is not None)


def replay_calls(world: WorldRecording, impl: str, deadline_s: float, start: int) -> list[dict]:
    """Every rank rebuilds its objects and makes its calls from ``start`` in one world; per rank what came of it."""
    return run_world(impl, world.world,
                     lambda handle: replay_rank(world.ranks[handle.rank], world.objects, impl, handle, start),
                     timeout_s=deadline_s)


def kernel_record_text(obj: Any) -> str:
    """``"; kernel record: ..."`` when the object's kernels wrote a diagnostic record before a trap, else ``""``."""
    try:
        from kernels.diag import record_of  # noqa: PLC0415 - imports CuTe DSL: only a kernel replay's record needs it

        record = record_of(obj)
        report = record.read() if record is not None else None
    except Exception as exc:  # noqa: BLE001 - a torn or foreign record is said, not fatal
        return f"; kernel record unreadable: {exc}"
    return f"; kernel record: {report.describe()}" if report is not None else ""


def mismatch_line(against: str, where: str, comparison: Any) -> list[str]:
    """One line for a call whose comparison failed (how many elements, the first of them); none when it passed."""
    if comparison.ok:
        return []
    first = comparison.first[0].describe() if comparison.first else ""
    return [f"MISMATCH: {where}: replay differs from {against} in {comparison.mismatch_count} elements; first: {first}"]


def expected_outputs(record: Any, index: int) -> dict:
    """What call ``index`` must produce: its recorded outputs, and every other tensor argument as it was passed."""
    position = record.position(index)
    return {**record.bundle.inputs(position), **record.bundle.outputs(position)}


def compare_call(record: Any, index: int, produced: dict, with_counters: bool) -> Comparison:
    """Call ``index``'s replayed outputs against the recording, bit for bit (counters when ``with_counters``).

    A public method's scratch arguments (``targets.scratch``) are not compared.
    """
    expected = expected_outputs(record, index)
    call = record.call(index)
    spec = record.spec(call["object"])
    unmodelled = scratch(spec["class"], call["method"]) if spec["kind"] == "public" else ()
    names = [k for k in sorted(expected) if (with_counters or not k.startswith(STATE_PREFIX))
             and k.split(".")[0] not in unmodelled]
    produced = {k: v for k, v in produced.items() if k.split(".")[0] not in unmodelled}
    total = compare_outputs(produced, expected, rank=record.rank, names=names, launch=index)
    for extra in sorted(set(produced) - set(expected) - {k for k in produced if k.startswith(STATE_PREFIX)}):
        total.merge(Comparison(1, 0, [Mismatch(record.rank, extra, {"structure": "not recorded"}, -1, "present",
                                               "absent", "-", "-", launch=index)]), 8)
    return total


def compare_with_recording(world: WorldRecording, results: list[dict]) -> tuple[list[str], int]:
    """(lines naming each rank and call whose replay differs from the recording, elements compared)."""
    lines, elements = [], 0
    for record, result in zip(world.ranks, results):
        for index, produced in sorted(result["produced"].items()):
            where = f"rank {record.rank} {record.where(index)}"
            if not record.completed(index):
                lines.append(f"{where}: completed in the replay, but was in flight when the recording ended "
                             f"({record.ended})")
                continue
            call = record.call(index)
            counters = result["counters"].get(call["object"], True)
            comparison = compare_call(record, index, produced, counters)
            elements += comparison.elements
            lines += mismatch_line("the recording", where, comparison)
            flight, used = call.get("flight"), result["flight"].get(index)
            if counters and flight is not None and None not in flight and used is not None \
                    and used != flight[1] - flight[0]:
                lines.append(f"MISMATCH: {where}: the replay used {used} flight launches, the recording "
                             f"{flight[1] - flight[0]}")
    return lines, elements


def compare_with_golden(world: WorldRecording, results: list[dict]) -> tuple[list[str], int]:
    """(lines naming each family system's call whose replay differs from the golden reference, calls compared)."""
    lines, compared = [], 0
    for record, result in zip(world.ranks, results):
        for index, produced in sorted(result["produced"].items()):
            call = record.call(index)
            spec = record.spec(call["object"])
            if spec["kind"] != "system":
                continue
            fam = adapter(spec["family"])
            config = fam.config_for(spec["config"], world.world)
            inputs = {k.removeprefix("call_inputs."): v for k, v in record.bundle.inputs(record.position(index)).items()}
            params = decode_plain(call["arguments"].get("call_params")) or {}
            reference = fam.reference(record.bundle.static(spec["name"]), config, inputs, params)
            got = {k.removeprefix(f"{RETURN}."): v for k, v in produced.items() if k.startswith(f"{RETURN}.")}
            comparison = compare_outputs(got, reference, rank=record.rank, launch=index,
                                         names=fam.compared_outputs(reference), axes=fam.output_axes)
            compared += 1
            lines += mismatch_line("the golden", f"rank {record.rank} {record.where(index)}", comparison)
    return lines, compared


def offline_report(directory: Path, world: WorldRecording) -> dict:
    """What the recording says without running anything: each rank's window, divergences, ranks that ended badly."""
    notes = [f"rank {r.rank}: {len(r.calls)} recorded calls (calls {r.calls[0]}..{r.calls[-1]})"
             f"{', the last in flight' if r.entry.get('in_flight') else ''}; {r.entry.get('calls_made')} made; "
             f"recording ended: {r.ended}" if r.bundle is not None and r.calls else
             f"rank {r.rank}: made no call; recording ended: {r.ended}" for r in world.ranks]
    found = divergences(world)
    findings = [f"DIVERGENCE: {d.describe()}" for d in found]
    # a rank whose job did not end by itself is a finding of its own (the replay may still tell why)
    findings += [f"RANK ENDED: rank {r.rank}: {r.ended}" for r in world.ranks if r.ended != ORDERLY_END]
    if not any(r.calls for r in world.ranks):
        findings.append("NOTHING RECORDED: no rank made a call, so nothing was replayed")
    return {"recording": str(directory), "family": world.family, "world": world.world,
            "first": found[0].as_dict() if found else None, "findings": findings, "notes": notes}


def replay_one(directory: Path, impl: str, deadline_s: float) -> dict:
    """Replay the world recorded at ``directory``; the report: ``findings`` (each names a rank and call) and ``notes``."""
    world = load_world(directory)
    report = offline_report(directory, world)
    if not any(r.calls for r in world.ranks):
        return report
    check_available(world.objects, impl)
    findings, notes = report["findings"], report["notes"]
    start = replay_start(world)
    try:
        results = replay_calls(world, impl, deadline_s, start)
    except Exception as exc:  # noqa: BLE001 - the world itself failed (its teardown after a trap): say so, keep the rest
        findings.append(f"REPLAY FAILED: the replayed world ended with {type(exc).__name__}: {first_line(exc)[:300]}")
        return report | {"impl": impl}
    for record, result in zip(world.ranks, results):
        notes += result["notes"]
        if result["error"] is not None:
            exc = result["error"]
            findings.append(f"REPLAY FAILED: rank {record.rank} at {record.where(result['at'])}: {type(exc).__name__}: "
                            f"{first_line(exc)[:400]}{kernel_record_text(result.get('failed_object'))}")
    compared = elements = 0
    try:
        lines, elements = compare_with_recording(world, results)
        findings += lines
        golden, compared = compare_with_golden(world, results)
        findings += golden
    except Exception as exc:  # noqa: BLE001 - after a kernel trap the device is gone; the findings so far stand
        findings.append(f"COMPARE FAILED: {type(exc).__name__}: {first_line(exc)[:300]}")
    replayed = sum(len(r["produced"]) for r in results)
    if replayed == 0 and not any(r["error"] for r in results):
        findings.append("NOTHING REPLAYED: every recorded call was captured into a CUDA graph (no data recorded); "
                        "the flight recorder's rings hold what the graphs ran")
    notes.append(f"replayed from call {start} with impl {impl}: {replayed} calls completed over "
                 f"{world.world} ranks, {elements} elements compared with the recording; "
                 f"{compared} compared with the golden reference")
    return report | {"impl": impl}


def isolated_budget_s(world: WorldRecording, deadline_s: float) -> float:
    """The child's time: a deadline per recorded call of the longest rank, plus one, plus the start and compile."""
    calls = max((len(r.calls) for r in world.ranks if r.bundle is not None), default=0)
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
    check_available(world.objects, "kernel")  # no GPU or no CuTe DSL: NotAvailable, exit 2
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
        if report.get("first"):
            print(f"  first divergence: {report['first']['what']}")
        for line in report["findings"]:
            print(f"  {line}")
        print(f"  verdict: {'FAILED' if report['findings'] else 'ok'} ({len(report['findings'])} findings)")
    if run_dir:
        (Path(run_dir) / "world_replay.json").write_text(json.dumps(reports, indent=1), encoding="utf-8")
    return 1 if any(r["findings"] for r in reports) else 0


__all__: Sequence[str] = ("run_bundle_replay", "replay_one", "recordings_under")
