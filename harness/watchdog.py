"""The harness-side deadline for every run, the end of everything it started, and the diagnosis.

torchrun has no per-worker timeout (its agent only notices exits), and a
rank that waits for a peer that never arrives waits forever, so the harness
keeps its own clock:

- ``deadline_s(launches, per_launch_s, startup_s)``: the budget of one job is
  the per-launch deadline times the launches it runs plus a startup
  allowance (interpreter, torch import, rendezvous).
- ``Supervised`` starts the child with ``start_new_session=True`` and a
  unique token in its environment. torchrun puts each worker in a session of
  its own, so the process group of the agent does not hold the workers; on
  expiry the watchdog therefore collects every process carrying the token
  (a ``/proc`` scan of environments, which also finds workers reparented
  after their agent died), sends SIGTERM to each of their process groups,
  waits a grace period, sends SIGKILL, and verifies that no process with the
  token remains and that ``os.killpg(pgid, 0)`` raises ``ProcessLookupError``
  for every group it saw.
- ``diagnose(progress, world)`` reads the ranks' progress records and names
  the rank that fell behind: the rank whose last begun launch is lowest
  while others began a later one; it reports the launch that rank never
  began, the step if the records carry one, and what every rank believed
  (its last event, launch, rows/steps and state such as launch counter or
  generation). Kernel diagnostic records (``kernels.diag``), when present in
  the run directory, are attached verbatim: they name the awaited rank and
  the expected and seen tags.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

TOKEN_VAR = "RANKCHECK_RUN_TOKEN"


def deadline_s(launches: int, per_launch_s: float, startup_s: float) -> float:
    """The budget of a job: ``per_launch_s`` for each launch plus ``startup_s``."""
    if launches < 0 or per_launch_s <= 0 or startup_s < 0:
        raise ValueError(
            f"deadline needs launches >= 0, per_launch_s > 0, startup_s >= 0; got {launches}, {per_launch_s}, {startup_s}"
        )
    return startup_s + per_launch_s * max(launches, 1)


def processes_with_token(token: str) -> dict[int, int]:
    """Every live process (pid -> pgid) whose environment carries ``TOKEN_VAR=token``."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            if needle not in env.split(b"\0"):
                continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            # the command name may hold spaces or parentheses: fields follow the last ')'
            fields = stat[stat.rindex(b")") + 2:].split()
            if fields[0] == b"Z":
                continue
            found[pid] = int(fields[2])
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
            continue
    return found


def _answers_signal_zero(send: Callable[[int, int], None], target: int) -> bool:
    """Whether ``send(target, 0)`` finds its target (one that exists but is not ours counts)."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists."""
    return _answers_signal_zero(os.killpg, pgid)


def process_alive(pid: int) -> bool:
    """True while process ``pid`` exists."""
    return _answers_signal_zero(os.kill, pid)


def _signal_groups(pgids: Sequence[int], sig: int) -> None:
    """Send ``sig`` to each process group, ignoring groups already gone."""
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class Outcome:
    """How a supervised child ended."""

    returncode: int | None
    timed_out: bool
    elapsed_s: float
    leftovers: list[int] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)


class Supervised:
    """A child process tree under a deadline; ended as a whole, and verified gone."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, stdout=None, stderr=None, grace_s: float = 3.0) -> None:
        self.token = uuid.uuid4().hex
        self.grace_s = grace_s
        child_env = dict(os.environ if env is None else env)
        child_env[TOKEN_VAR] = self.token
        self.started = time.monotonic()
        self.proc = subprocess.Popen(list(argv), env=child_env, cwd=cwd, stdout=stdout, stderr=stderr,
                                     start_new_session=True)
        self._seen_groups: set[int] = {self.proc.pid}

    def wait(self, deadline: float, *, poll: Callable[[], None] | None = None,
             interval_s: float = 0.2) -> Outcome:
        """Wait up to ``deadline`` seconds, or until ``poll()`` says time is up; then end everything."""
        timed_out = False
        try:
            while True:
                self._seen_groups.update(processes_with_token(self.token).values())
                rc = self.proc.poll()
                if rc is not None:
                    break
                if poll is not None and poll():
                    timed_out = True
                    break
                if time.monotonic() - self.started > deadline:
                    timed_out = True
                    break
                time.sleep(interval_s)
        except BaseException:
            # interrupted (Ctrl-C, an error in poll): nothing started here may outlive the harness
            self.end_all()
            raise
        leftovers = self.end_all()
        return Outcome(self.proc.returncode, timed_out, time.monotonic() - self.started, leftovers,
                       sorted(self._seen_groups))

    def end_all(self) -> list[int]:
        """SIGTERM every group of the tree, SIGKILL after the grace period; return pids still alive."""
        self._seen_groups.update(processes_with_token(self.token).values())
        live = [g for g in self._seen_groups if group_alive(g)] + list(processes_with_token(self.token))
        if live:
            _signal_groups(sorted(self._seen_groups), signal.SIGTERM)
            end = time.monotonic() + self.grace_s
            while time.monotonic() < end and processes_with_token(self.token):
                self._reap()
                time.sleep(0.05)
            remaining = processes_with_token(self.token)
            self._seen_groups.update(remaining.values())
            if remaining:
                _signal_groups(sorted(self._seen_groups), signal.SIGKILL)
                for pid in remaining:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            self._reap()
            if not processes_with_token(self.token) and not any(group_alive(g) for g in self._seen_groups):
                break
            time.sleep(0.05)
        self._reap()
        return sorted(processes_with_token(self.token))

    def _reap(self) -> None:
        """Collect the direct child's exit status if it has ended."""
        try:
            self.proc.wait(timeout=0)
        except subprocess.TimeoutExpired:
            pass


# ----------------------------------------------------------------------------- diagnosis


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

    def to_json(self) -> dict:
        """The diagnosis as a JSON-ready dict."""
        return dict(self.__dict__)


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
             kernel_records: Sequence[dict] = ()) -> Diagnosis:
    """Name the rank that fell behind from every rank's progress records.

    ``exited`` maps ranks known to have exited (rank -> exit code, from the
    launcher) so that a crash is told apart from a hang.
    """
    exited = dict(exited or {})
    beliefs = {r: _belief(recs) for r, recs in progress.items()}

    def marker(recs: list[dict]) -> dict | None:
        """The rank's injected-fault record (hang, crash, skip, repeat; delay while still delayed), if any."""
        for rec in reversed(recs):
            if rec.get("event") in ("hang", "crash", "skip", "repeat"):
                return rec
        if recs and recs[-1].get("event") == "delay":
            return recs[-1]
        return None

    def next_launch(recs: list[dict]) -> int:
        """The launch a rank was in or was about to begin."""
        mark = marker(recs)
        if mark is not None:
            return int(mark["launch"])
        begun = _last(recs, "begin")
        ended = _last(recs, "end")
        if begun is None:
            return 0
        if ended is not None and ended["launch"] == begun["launch"]:
            return int(begun["launch"]) + 1
        return int(begun["launch"])

    def begun_count(recs: list[dict]) -> int:
        """How many launches a rank began."""
        return sum(1 for r in recs if r.get("event") == "begin")

    if not progress:
        return Diagnosis(None, None, None, "no progress records", beliefs, list(kernel_records))
    counts = {r: begun_count(recs) for r, recs in progress.items()}
    bad_exit = {r: c for r, c in exited.items() if c != 0}
    marked = {r: marker(recs) for r, recs in progress.items() if marker(recs) is not None}
    laggard: int | None = None
    if marked:
        laggard = min(marked)
    elif bad_exit:
        laggard = min(bad_exit, key=lambda r: (counts.get(r, 0), r))
    elif len(set(counts.values())) > 1:
        laggard = min(counts, key=lambda r: (counts[r], r))
    step = None
    if kernel_records:
        first = kernel_records[0]
        step = first.get("step")
        if laggard is None and first.get("awaited_rank") is not None:
            laggard = int(first["awaited_rank"])
    if laggard is None:
        launches = {r: next_launch(recs) for r, recs in progress.items()}
        common = sorted(set(launches.values()))
        return Diagnosis(None, common[0] if len(common) == 1 else None, step,
                         "every rank stopped at the same point (launches " + ", ".join(
                             f"rank {r}: {l}" for r, l in sorted(launches.items())) + "); no single rank fell behind",
                         beliefs, list(kernel_records))
    launch = next_launch(progress.get(laggard, []))
    how = "did not begin"
    if laggard in marked:
        how = {"hang": "hung before", "crash": "crashed before", "skip": "skipped", "repeat": "repeated",
               "delay": "was delayed before"}[marked[laggard]["event"]]
    elif laggard in bad_exit:
        how = f"exited with code {bad_exit[laggard]} before"
    others = [r for r in progress if r != laggard and counts[r] > counts.get(laggard, 0)]
    text = f"rank {laggard} {how} launch {launch}"
    if others and how != "repeated":
        text += f" while rank(s) {', '.join(map(str, sorted(others)))} began it"
    if step is not None:
        text += f" (kernel record: step {step})"
    cause = marked[laggard]["event"] if laggard in marked else ("exit" if laggard in bad_exit else "behind")
    return Diagnosis(laggard, launch, step, text, beliefs, list(kernel_records), cause)


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
