"""The harness-side deadline for every run, the end of everything it started, and the diagnosis.

torchrun has no per-worker timeout (its agent only notices exits), and a
rank that waits for a peer that never arrives waits forever, so the harness
keeps its own clock. The budgets are the launchers' (a case's: the
per-launch deadline times its launches plus a per-case allowance,
``harness.launchers.groups.case_budget``; a job's: those plus a startup
allowance, ``harness.launchers.job_clock``); this module enforces them:

- ``Supervised`` starts the child with ``start_new_session=True`` and a
  unique token in its environment, after the tokens of the trees it runs
  under (a harness started by a harness: ``harness.scale``'s agents), so
  ending an outer tree also finds the inner trees' processes, even those of
  an inner harness that was killed before it could end them. torchrun puts each worker in a session of
  its own, so the process group of the agent does not hold the workers; on
  expiry the watchdog therefore collects every process carrying the token
  (a ``/proc`` scan of environments, which also finds workers reparented
  after their agent died), sends SIGTERM to each of their process groups,
  waits a grace period, sends SIGKILL, and verifies that no process with the
  token remains and that ``os.killpg(pgid, 0)`` raises ``ProcessLookupError``
  for every group it saw. A tree that runs out of time is first asked for
  its workers' Python stacks (``harness.evidence``), which the diagnosis
  attaches.
- Interrupts: every ``Supervised`` is in a module-level registry from before
  its first process exists until its processes are verified gone.
  ``install_interrupt_handlers`` (the command line's main thread) makes
  SIGINT and SIGTERM alike call ``end_every_tree`` once, which ends every
  live tree at once (SIGTERM to all, one grace period, SIGKILL, verify) and
  refuses new ones, and then raises KeyboardInterrupt. Signals that arrive
  meanwhile or after are ignored, so a second Ctrl-C a millisecond later
  cannot abort the cleanup half-way and leave a torchrun agent and its
  workers running. Threads that own trees (several JobRunners at once) see
  ``TreesEnded`` (a KeyboardInterrupt) from ``Supervised`` instead of an
  outcome the interrupt caused, and cannot start another tree.
- ``diagnose(progress, world)`` reads the ranks' progress records and names
  the rank that fell behind: the rank whose last begun launch is lowest
  while others began a later one; it reports the launch that rank never
  began, the step if the records carry one, and what every rank believed
  (its last event, launch, rows/steps and state such as launch counter or
  generation). Kernel diagnostic records (``kernels.diag``), when present in
  the run directory, are attached verbatim: they name the awaited rank and
  the expected and seen tags. Each rank's innermost Python frames, its
  log and any NCCL flight-recorder dumps come along (``harness.evidence``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from harness.evidence import request_stacks

TOKEN_VAR = "RANKCHECK_RUN_TOKEN"


def processes_with_token(token: str) -> dict[int, int]:
    """Every live process (pid -> pgid) that runs under the tree of ``token`` (``TOKEN_VAR`` holds it among its tokens)."""
    return processes_with_tokens([token])[token]


def processes_with_tokens(tokens: Sequence[str]) -> dict[str, dict[int, int]]:
    """For each token, every live process (pid -> pgid) whose environment carries it (one ``/proc`` scan for all)."""
    prefix = f"{TOKEN_VAR}=".encode()
    wanted = {token.encode(): token for token in tokens}
    found: dict[str, dict[int, int]] = {token: {} for token in tokens}
    if not wanted:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            # the variable holds the tokens of every tree the process runs under, outermost first
            held = next((v[len(prefix):].split() for v in env.split(b"\0") if v.startswith(prefix)), [])
            hits = [wanted[t] for t in held if t in wanted]
            if not hits:
                continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            # the command name may hold spaces or parentheses: fields follow the last ')'
            fields = stat[stat.rindex(b")") + 2:].split()
            if fields[0] == b"Z":
                continue
            for token in hits:
                found[token][pid] = int(fields[2])
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
    # where the end went, in seconds: until the wait decided, asking for stacks, ending the tree
    ending: dict[str, float] = field(default_factory=dict)


class TreesEnded(KeyboardInterrupt):
    """The harness is being interrupted: its process trees were ended and no new one may start."""


# Every Supervised tree of this process that may still have processes, by token. An RLock: the
# interrupt handler runs in the main thread and may interrupt that thread while it holds the lock.
_registry_lock = threading.RLock()
_live_trees: dict[str, "Supervised"] = {}
_ending = False


def _register(tree: "Supervised") -> None:
    """Add ``tree`` to the live trees, or raise TreesEnded when every tree is being ended."""
    with _registry_lock:
        if _ending:
            raise TreesEnded("the harness was interrupted: no new process tree is started")
        _live_trees[tree.token] = tree


def _unregister(tree: "Supervised") -> None:
    """Remove ``tree`` from the live trees (its processes are verified gone)."""
    with _registry_lock:
        _live_trees.pop(tree.token, None)


def ending() -> bool:
    """Whether ``end_every_tree`` has been called in this process (no new tree may start)."""
    return _ending


def end_every_tree() -> list[int]:
    """End every live Supervised tree of this process at once and refuse new ones; return pids still alive.

    Safe to call again, also from inside itself (a signal arriving meanwhile):
    ending a tree twice only finds its processes gone.
    """
    global _ending
    with _registry_lock:
        _ending = True
        trees = list(_live_trees.values())
    return end_trees(trees)


def _on_interrupt(signum: int, frame: object) -> None:
    """The SIGINT/SIGTERM handler: the first one ends every tree, then raises KeyboardInterrupt; later ones are ignored."""
    if _ending:
        # The trees are being (or have been) ended and the report closed: a second Ctrl-C or a
        # SIGTERM right after must not abort that half-way and leave processes running.
        return
    end_every_tree()
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: every process tree of this harness was ended")


def install_interrupt_handlers() -> None:
    """Make SIGINT and SIGTERM end every process tree of this harness and then raise KeyboardInterrupt (call from the main thread)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_interrupt)


def end_trees(trees: Sequence["Supervised"]) -> list[int]:
    """SIGTERM every group of every tree, SIGKILL after the longest grace period; verify; return pids still alive."""
    if not trees:
        return []
    tokens = [t.token for t in trees]

    def scan() -> dict[str, dict[int, int]]:
        """Processes of each tree now, remembering every process group seen."""
        found = processes_with_tokens(tokens)
        for tree in trees:
            tree._seen_groups.update(found[tree.token].values())
        return found

    def pids(found: dict[str, dict[int, int]]) -> list[int]:
        """Every pid of every tree in a scan (once, though a process of a nested tree is in both)."""
        return sorted({pid for procs in found.values() for pid in procs})

    def groups() -> list[int]:
        """Every process group seen in any tree (copied: another thread may add to them meanwhile)."""
        return sorted({g for tree in trees for g in set(tree._seen_groups)})

    def reap() -> None:
        """Collect the exit status of every direct child that has ended."""
        for tree in trees:
            tree._reap()

    if pids(scan()) or any(group_alive(g) for g in groups()):
        _signal_groups(groups(), signal.SIGTERM)
        end = time.monotonic() + max(t.grace_s for t in trees)
        while time.monotonic() < end and pids(scan()):
            reap()
            time.sleep(0.05)
        remaining = pids(scan())
        if remaining:
            _signal_groups(groups(), signal.SIGKILL)
            for pid in remaining:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        reap()
        if not pids(scan()) and not any(group_alive(g) for g in groups()):
            break
        time.sleep(0.05)
    reap()
    found = scan()
    for tree in trees:
        if not found[tree.token]:
            _unregister(tree)
    return pids(found)


class Supervised:
    """A child process tree under a deadline; ended as a whole, and verified gone.

    The tree is in this module's registry from before its first process
    exists until its processes are verified gone, so ``end_every_tree`` (the
    interrupt path) ends it wherever the thread that owns it is. With
    ``stacks_dir``, a tree that runs out of time is first asked for its
    workers' Python stacks (``harness.evidence.request_stacks``).
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, stdout=None, stderr=None, grace_s: float = 3.0,
                 stacks_dir: str | os.PathLike | None = None) -> None:
        self.token = uuid.uuid4().hex
        self.grace_s = grace_s
        self.stacks_dir = stacks_dir
        self.proc: subprocess.Popen | None = None
        self.spare: str | None = None  # a standby spare handed a job: "ready" or "starting" at the hand-over
        self._seen_groups: set[int] = set()
        child_env = dict(os.environ if env is None else env)
        child_env[TOKEN_VAR] = " ".join(filter(None, [child_env.get(TOKEN_VAR), self.token]))
        # registered before the child exists: an interrupt from here on finds its processes by the token
        _register(self)
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(list(argv), env=child_env, cwd=cwd, stdout=stdout, stderr=stderr,
                                         start_new_session=True)
            self._seen_groups.add(self.proc.pid)
        except BaseException:
            self.end_all()
            raise
        if _ending:
            # interrupted while this thread started the child: the interrupt's scan may have missed it
            self.end_all()
            raise TreesEnded("the harness was interrupted while a process tree started; it was ended")

    def wait(self, deadline: float, *, poll: Callable[[], None] | None = None,
             interval_s: float = 0.2) -> Outcome:
        """Wait up to ``deadline`` seconds, or until ``poll()`` says time is up; then end everything.

        Raises TreesEnded when the harness is interrupted meanwhile (its
        outcome is the interrupt's doing, not the job's).
        """
        timed_out = False
        try:
            while True:
                self._seen_groups.update(processes_with_token(self.token).values())
                if _ending:
                    raise TreesEnded("the harness was interrupted; this process tree was ended")
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
            decided = time.monotonic()
            if timed_out and self.stacks_dir is not None:
                request_stacks(processes_with_token(self.token), self.stacks_dir)
        except BaseException:
            # interrupted (Ctrl-C, an error in poll): nothing started here may outlive the harness
            self.end_all()
            raise
        asked = time.monotonic()
        leftovers = self.end_all()
        if _ending:
            raise TreesEnded("the harness was interrupted; this process tree was ended")
        ended = time.monotonic()
        ending = {"decided_s": round(decided - self.started, 3), "stacks_s": round(asked - decided, 3),
                  "end_s": round(ended - asked, 3)}
        return Outcome(self.proc.returncode, timed_out, ended - self.started, leftovers,
                       sorted(self._seen_groups), ending)

    def end_all(self) -> list[int]:
        """SIGTERM every group of the tree, SIGKILL after the grace period; return pids still alive."""
        return end_trees([self])

    def _reap(self) -> None:
        """Collect the direct child's exit status if it has ended."""
        if self.proc is None:
            return
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
    # rank -> innermost Python frames (most recent call first), from the stacks asked for on expiry
    stacks: dict = field(default_factory=dict)
    # rank -> that rank's log file
    logs: dict = field(default_factory=dict)
    # NCCL flight-recorder dumps the job left
    nccl_dumps: list = field(default_factory=list)
    # the kernels' flight-recorder findings, one per instance (harness.flight_evidence)
    flight: list = field(default_factory=list)
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
             kernel_records: Sequence[dict] = (), stacks: Mapping[int, list[str]] | None = None,
             logs: Mapping[int, str] | None = None, nccl_dumps: Sequence[str] = ()) -> Diagnosis:
    """Name the rank that fell behind from every rank's progress records, with the evidence gathered for it.

    ``exited`` maps ranks known to have exited (rank -> exit code, from the
    launcher) so that a crash is told apart from a hang; ``stacks``, ``logs``
    and ``nccl_dumps`` (``harness.evidence``) are attached as they are.
    """
    found = _who_fell_behind(progress, exited=exited, kernel_records=kernel_records)
    found.stacks = dict(stacks or {})
    found.logs = {rank: str(path) for rank, path in (logs or {}).items()}
    found.nccl_dumps = list(nccl_dumps)
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
                     kernel_records: Sequence[dict]) -> Diagnosis:
    """The diagnosis from the progress records and kernel records alone."""
    exited = dict(exited or {})
    beliefs = {r: _belief(recs) for r, recs in progress.items()}
    if not progress:
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
    if marked:
        laggard = min(marked)
    elif bad_exit:
        laggard = min(bad_exit, key=lambda r: (counts.get(r, 0), r))
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
    how = "did not begin"
    if laggard in marked:
        how = {"hang": "hung before", "crash": "crashed before", "skip": "skipped", "repeat": "repeated",
               "delay": "was delayed before"}[marked[laggard]["event"]]
    elif laggard in bad_exit:
        how = f"exited with code {bad_exit[laggard]} before"
    elif laggard in deviating:
        how = "disagreed (" + ", ".join(f"{k} {v[0]} where the call has {v[1]}"
                                        for k, v in sorted(deviating[laggard].items())) + ") at"
    others = [r for r in progress if r != laggard and counts[r] > counts.get(laggard, 0)]
    text = f"rank {laggard} {how} launch {launch}"
    if others and how != "repeated":
        text += f" while rank(s) {', '.join(map(str, sorted(others)))} began it"
    if step is not None:
        text += f" (kernel record: step {step})"
    cause = marked[laggard]["event"] if laggard in marked else (
        "exit" if laggard in bad_exit else "disagree" if laggard in deviating else "behind")
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
