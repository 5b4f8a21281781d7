"""Which rank fell behind, and why: the diagnosis of a case that timed out or failed.

``diagnose(progress, ...)`` reads the ranks' progress records and names
the rank that fell behind: the rank whose last begun launch is lowest
while others began a later one; it reports the launch that rank never
began, the step if the records carry one, and what every rank believed
(its last event, launch, rows/steps and state such as launch counter or
generation). Kernel diagnostic records (``kernels.diag``), which the
caller reads from the run directory, are attached verbatim: they name the
awaited rank and the expected and seen tags. Each rank's innermost Python frames, its
log and any NCCL flight-recorder dumps come along (``harness.launch.evidence``),
and, for a job out of time, the GPU's other compute processes then
(``harness.launch.gpu_neighbours``).

A rank that did not fall behind but died is named first: a rank the
launcher saw exit non-zero or be killed (``exited``: rank -> exit code,
negative for a signal; ``harness.launch.rank_deaths``), then a rank whose
process was stopped when its time ran out (``stopped``: rank -> pid), each
with its exit code or signal and its last progress record; then a rank an
injected fault marks, one that disagreed about the call, and one behind the
others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from harness.launch.rank_deaths import death_words


@dataclass
class Diagnosis:
    """Which rank fell behind, where, and what each rank believed."""

    rank: int | None
    launch: int | None
    step: int | None
    text: str
    beliefs: dict = field(default_factory=dict)
    kernel_records: list = field(default_factory=list)
    cause: str | None = None
    # rank -> innermost Python frames (most recent call first), from the stacks asked for on expiry
    stacks: dict = field(default_factory=dict)
    # rank -> that rank's log file
    logs: dict = field(default_factory=dict)
    # rank -> the file holding that rank's process's whole stack dump (stacks/rank<k>-<pid>.txt)
    stack_files: dict = field(default_factory=dict)
    # NCCL flight-recorder dumps the job left
    nccl_dumps: list = field(default_factory=list)
    # the kernels' flight-recorder findings, one per instance (harness.launch.flight_evidence)
    flight: list = field(default_factory=list)
    # out of time: who held the GPU at the deadline, in one sentence (harness.launch.gpu_neighbours.summary)
    gpu_processes: str | None = None
    # the TP group whose ranks the numbers above are (None: one group spans the world), and its global ranks
    group: int | None = None
    group_ranks: list = field(default_factory=list)

    def to_json(self) -> dict:
        """The diagnosis as a JSON-ready dict."""
        return dict(self.__dict__)

    def in_group(self, group: int | None, ranks: Sequence[int]) -> "Diagnosis":
        """This diagnosis of TP group ``group`` (global ``ranks``), its text naming the group and the rank's global number."""
        self.group, self.group_ranks = group, list(ranks)
        if group is not None and ranks:
            where = f"TP group {group} (ranks {ranks[0]}-{ranks[-1]})"
            if self.rank is not None and 0 <= self.rank < len(ranks):
                where += f", global rank {ranks[self.rank]}"
            self.text = f"{where}: {self.text}"
        return self


def _last(records: list[dict], event: str) -> dict | None:
    """The last record of ``event`` kind, or None."""
    for rec in reversed(records):
        if rec.get("event") == event:
            return rec
    return None


def _belief(records: list[dict]) -> dict:
    """What one rank believed at its last record: event, launch, params and state."""
    if not records:
        return {"event": None, "launch": None, "text": "no progress record (never reached the first launch)"}
    last = records[-1]
    params = last.get("params") or {}
    shown = {k: params[k] for k in ("rows", "steps", "call") if k in params}
    return {"event": last.get("event"), "launch": last.get("launch"), "params": shown,
            "state": last.get("state") or {},
            "text": f"{last.get('event')} launch {last.get('launch')} {shown} state {last.get('state') or {}}"}


def diagnose(progress: Mapping[int, list[dict]], *, exited: Mapping[int, int] | None = None,
             stopped: Mapping[int, int] | None = None,
             kernel_records: Sequence[dict] = (), stacks: Mapping[int, list[str]] | None = None,
             logs: Mapping[int, str] | None = None, nccl_dumps: Sequence[str] = (),
             stack_files: Mapping[int, str] | None = None, gpu_processes: str | None = None) -> Diagnosis:
    """Name the rank that fell behind from every rank's progress records, with the evidence gathered for it.

    ``progress`` maps each rank to its progress records in order. ``exited``
    maps ranks known to have exited (rank -> exit code, from the launcher) so
    that a crash is told apart from a hang, ``stopped`` the ranks whose
    process was stopped (rank -> pid). ``kernel_records`` are the
    ``kernels.diag`` records the caller found: the first gives the step, and
    its awaited rank when the progress records name none; all are attached.
    ``stacks`` (rank -> innermost frames), ``stack_files`` (rank -> its
    process's stack file), ``logs`` (rank -> log file) and ``nccl_dumps``
    (``harness.launch.evidence``) and ``gpu_processes`` (the GPU's compute
    processes at the deadline, ``harness.launch.gpu_neighbours.summary``)
    are attached as they are.
    """
    found = _who_fell_behind(progress, exited=exited, stopped=stopped, kernel_records=kernel_records)
    found.stacks = dict(stacks or {})
    found.logs = {rank: str(path) for rank, path in (logs or {}).items()}
    found.stack_files = {rank: str(path) for rank, path in (stack_files or {}).items()}
    found.nccl_dumps = list(nccl_dumps)
    found.gpu_processes = gpu_processes
    return found


def _fault_marker(recs: list[dict]) -> dict | None:
    """The rank's injected-fault record (hang, crash, skip, repeat; delay while still delayed), if any."""
    for rec in reversed(recs):
        if rec.get("event") in ("hang", "crash", "skip", "repeat"):
            return rec
    if recs and recs[-1].get("event") == "delay":
        return recs[-1]
    return None


def _next_launch(recs: list[dict]) -> int:
    """The launch a rank was in or was about to begin."""
    mark = _fault_marker(recs)
    if mark is not None:
        return int(mark["launch"])
    begun = _last(recs, "begin")
    ended = _last(recs, "end")
    if begun is None:
        return 0
    if ended is not None and ended["launch"] == begun["launch"]:
        return int(begun["launch"]) + 1
    return int(begun["launch"])


def _begun_count(recs: list[dict]) -> int:
    """How many launches a rank began."""
    return sum(1 for r in recs if r.get("event") == "begin")


def _who_fell_behind(progress: Mapping[int, list[dict]], *, exited: Mapping[int, int] | None,
                     kernel_records: Sequence[dict], stopped: Mapping[int, int] | None = None) -> Diagnosis:
    """The diagnosis from the progress records, the ranks' deaths and stops, and the kernel records."""
    exited = dict(exited or {})
    stopped = dict(stopped or {})
    beliefs = {r: _belief(recs) for r, recs in progress.items()}
    if not progress and not exited and not stopped:
        return Diagnosis(None, None, None, "no progress records", beliefs, list(kernel_records))
    counts = {r: _begun_count(recs) for r, recs in progress.items()}
    bad_exit = {r: c for r, c in exited.items() if c != 0}
    marked = {r: mark for r, recs in progress.items() if (mark := _fault_marker(recs)) is not None}
    # ranks whose last launch began with other parameters than the call's (their ``begin`` says so): the
    # cause, ahead of a rank merely behind (kernels given disagreeing calls may all wait inside the launch,
    # or one may trap and end the process before a peer wrote its ``begin``)
    deviating = {r: rec["deviates"] for r, recs in progress.items()
                 if (rec := _last(recs, "begin")) is not None and rec.get("deviates")}
    laggard: int | None = None
    if bad_exit:
        laggard = min(bad_exit, key=lambda r: (counts.get(r, 0), r))
    elif stopped:
        laggard = min(stopped)
    elif marked:
        laggard = min(marked)
    elif deviating:
        laggard = min(deviating)
    elif len(set(counts.values())) > 1:
        laggard = min(counts, key=lambda r: (counts[r], r))
    step = None
    if kernel_records:
        first = kernel_records[0]
        step = first.get("step")
        if laggard is None and first.get("awaited_rank") is not None:
            laggard = int(first["awaited_rank"])
    if laggard is None:
        launches = {r: _next_launch(recs) for r, recs in progress.items()}
        common = sorted(set(launches.values()))
        return Diagnosis(None, common[0] if len(common) == 1 else None, step,
                         "every rank stopped at the same point (launches " + ", ".join(
                             f"rank {r}: {l}" for r, l in sorted(launches.items())) + "); no single rank fell behind",
                         beliefs, list(kernel_records))
    launch = _next_launch(progress.get(laggard, []))
    how, cause = _how(laggard, marked, bad_exit, stopped, deviating)
    others = [r for r in progress if r != laggard and counts[r] > counts.get(laggard, 0)]
    text = f"rank {laggard} {how} launch {launch}"
    if others and how != "repeated":
        text += f" while rank(s) {', '.join(map(str, sorted(others)))} began it"
    if step is not None:
        text += f" (kernel record: step {step})"
    if cause == "crash" and laggard in bad_exit:
        text += f" (it {death_words(bad_exit[laggard])})"
    if laggard in bad_exit or laggard in stopped:
        text += f"; its last progress record: {beliefs.get(laggard, _belief([]))['text']}"
    return Diagnosis(laggard, launch, step, text, beliefs, list(kernel_records), cause)


def _how(rank: int, marked: Mapping, bad_exit: Mapping[int, int], stopped: Mapping[int, int],
         deviating: Mapping) -> tuple[str, str]:
    """(what ``rank`` did, in words before "launch k"; the cause's name) from the evidence against it."""
    if rank in marked and (rank not in bad_exit or marked[rank]["event"] == "crash"):
        event = marked[rank]["event"]
        how = {"hang": "hung before", "crash": "crashed before", "skip": "skipped", "repeat": "repeated",
               "delay": "was delayed before"}[event]
        return how, event
    if rank in bad_exit:
        code = bad_exit[rank]
        return f"{death_words(code)} at", "signal" if code < 0 else "exit"
    if rank in stopped:
        return f"was stopped (process {stopped[rank]} in state T: SIGSTOP or a debugger) at", "stopped"
    if rank in deviating:
        return "disagreed (" + ", ".join(f"{k} {v[0]} where the call has {v[1]}"
                                         for k, v in sorted(deviating[rank].items())) + ") at", "disagree"
    return "did not begin", "behind"


def kernel_diag_records(case_dir: str | os.PathLike) -> list[dict]:
    """Kernel diagnostic records dumped by the ranks into ``case_dir`` (``rank<k>.diag.json``), decoded."""
    paths = sorted(Path(case_dir).glob("rank*.diag.json"))
    if not paths:
        return []
    try:
        from kernels import diag  # noqa: PLC0415 - written by the kernels package; host side needs torch only
    except Exception as exc:  # noqa: BLE001
        return [{"file": str(p), "problem": f"kernels.diag not importable: {exc}"} for p in paths]
    out = []
    for path in paths:
        try:
            report = diag.load_dump(path)
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file is reported, not fatal
            out.append({"file": str(path), "problem": f"{type(exc).__name__}: {exc}"})
            continue
        if report is not None:
            out.append(report.to_json() | {"file": str(path), "text": report.describe()})
    return out
