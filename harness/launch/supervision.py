"""The harness-side deadline for every run, and the end of everything it started.

torchrun has no per-worker timeout (its agent only notices exits), and a
rank that waits for a peer that never arrives waits forever, so the harness
keeps its own clock. The budgets are the launchers' (a case's: the
per-launch deadline times its launches plus a per-case allowance,
``harness.launch.groups.case_budget``; a job's: those plus a startup
allowance, ``harness.launch.job_clock``); this module enforces them:

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
  its workers' Python stacks (``harness.launch.evidence``) and for the GPU's
  compute processes (``harness.launch.gpu_neighbours``), which the diagnosis
  (``harness.launch.diagnosis``) attaches.
- Interrupts: every ``Supervised`` is in a module-level registry from before
  its first process exists until its processes are verified gone.
  ``install_interrupt_handlers`` (the command line's main thread) makes
  SIGINT, SIGTERM and SIGHUP (a lost terminal or SSH session) alike call
  ``end_every_tree`` once (``received_signal`` names the first, for the
  report's ``ended``), which ends every
  live tree at once (SIGTERM to all, one grace period, SIGKILL, verify) and
  refuses new ones, and then raises KeyboardInterrupt. Signals that arrive
  meanwhile or after are ignored, so a second Ctrl-C a millisecond later
  cannot abort the cleanup half-way and leave a torchrun agent and its
  workers running. Threads that own trees (several JobRunners at once) see
  ``TreesEnded`` (a KeyboardInterrupt) from ``Supervised`` instead of an
  outcome the interrupt caused, and cannot start another tree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from harness.launch import gpu_neighbours
from harness.launch.evidence import request_stacks
from harness.wire.processes import group_alive

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
    # out of time: the GPU's compute processes at the deadline (harness.launch.gpu_neighbours), if nvidia-smi answered
    gpu_processes: str | None = None


class TreesEnded(KeyboardInterrupt):
    """The harness is being interrupted: its process trees were ended and no new one may start."""


# Every Supervised tree of this process that may still have processes, by token. An RLock: the
# interrupt handler runs in the main thread and may interrupt that thread while it holds the lock.
_registry_lock = threading.RLock()
_live_trees: dict[str, "Supervised"] = {}
_ending = False
_received: str | None = None  # the name of the first signal the handlers took ("SIGINT", "SIGTERM", "SIGHUP")
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


def received_signal() -> str | None:
    """The name of the first interrupt signal this process's handlers took (None before any)."""
    return _received


def _on_interrupt(signum: int, frame: object) -> None:
    """The SIGINT/SIGTERM/SIGHUP handler: the first one ends every tree, then raises KeyboardInterrupt; later ones are
    ignored."""
    global _received
    if _ending:
        # The trees are being (or have been) ended and the report closed: a second Ctrl-C or a
        # SIGTERM right after must not abort that half-way and leave processes running.
        return
    _received = signal.Signals(signum).name
    end_every_tree()
    raise KeyboardInterrupt(f"{_received}: every process tree of this harness was ended")


def install_interrupt_handlers() -> None:
    """Make SIGINT, SIGTERM and SIGHUP end every process tree of this harness and then raise KeyboardInterrupt (call
    from the main thread)."""
    for sig in INTERRUPT_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue  # started under nohup: a lost terminal is meant not to end the run
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
    workers' Python stacks (``harness.launch.evidence.request_stacks``).
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
             interval_s: float = 0.2, on_expiry: Callable[[], None] | None = None) -> Outcome:
        """Wait up to ``deadline`` seconds, or until ``poll()`` says time is up; then end everything.

        ``on_expiry`` is called once time is up, before anything is signalled
        (the processes are as the deadline found them: a stopped rank is still
        stopped).

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
            if timed_out and on_expiry is not None:
                on_expiry()
            gpu_processes = None
            if timed_out and self.stacks_dir is not None:
                own = processes_with_token(self.token)
                gpu_processes = self._stacks_and_gpu_snapshot(own)
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
                       sorted(self._seen_groups), ending, gpu_processes)

    def _stacks_and_gpu_snapshot(self, own: Mapping[int, int]) -> str | None:
        """Ask ``own``'s workers for their stacks while ``nvidia-smi`` lists the GPU's processes (the two waits
        overlap: each is seconds on a loaded machine); return the snapshot's path, or None."""
        shot: list = []
        path = gpu_neighbours.snapshot_path(self.stacks_dir, self.proc.pid)
        query = threading.Thread(target=lambda: shot.append(gpu_neighbours.snapshot(own, path)), daemon=True,
                                 name="gpu-snapshot")
        query.start()
        request_stacks(own, self.stacks_dir)
        # the query kills nvidia-smi past its timeout and waits at most a second more for it
        query.join(gpu_neighbours.QUERY_TIMEOUT_S + 2.0)
        return str(shot[0]) if shot and shot[0] is not None else None

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
