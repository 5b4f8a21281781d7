"""Run directories: a fresh one per run by default, and a lock that keeps two runs from ever sharing one.

A run's files (job files, per-rank results and progress, the reports) are
its state: two runs writing one directory read each other's results and
swap verdicts. So:

- ``new_run_dir`` names a directory no other run can have picked:
  ``runs/<UTC time>-<host>-<pid>-<8 random hex digits>`` under the
  repository root (git-ignored), created exclusively (``mkdir`` without
  ``exist_ok``; a name taken anyway draws another random part).
- ``run_dir_lock`` holds an exclusive ``fcntl.flock`` on ``<run>/run.lock``
  for the run's life, with the holder's ``host pid`` written into the file.
  An explicit ``--run-dir`` another live run holds is refused at once with
  ``RunDirBusy`` (a ``ValueError``: the command line's exit 2) naming the
  holder, before anything in the directory changes. The kernel drops the
  lock when its holder ends, however it ends (a SIGKILL too), so a directory
  left by a dead run is free again. The lock is re-entrant within one
  process (a replay runs its validation in the same directory): a count per
  directory, the file closed when the outermost holder leaves.
- A directory that cannot be created or locked (read-only, full disk, not a
  directory) is ``RunDirError`` naming it and the cause, also exit 2.

``flock`` locks hold between processes of one host and, on most shared file
systems, between hosts; the holder's host in the file says whose it is.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK_NAME = "run.lock"


class RunDirError(ValueError):
    """A run directory that cannot be created, written or locked (the message names it and the cause)."""


class RunDirBusy(RunDirError):
    """A run directory another live run holds (the message names the holder)."""


def new_run_dir(parent: Path | None = None, prefix: str = "") -> Path:
    """Create and return ``<parent>/<prefix><UTC time>-<host>-<pid>-<random>`` (``runs/`` of the repository by
    default)."""
    parent = Path(parent) if parent is not None else REPO_ROOT / "runs"
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:40] or "host"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    try:
        parent.mkdir(parents=True, exist_ok=True)
        while True:
            path = parent / f"{prefix}{stamp}-{host}-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue  # 32 random bits drawn twice: draw again
    except OSError as exc:
        raise RunDirError(f"cannot create a run directory under {parent}: {exc.strerror or exc}") from None


_held: dict[Path, list] = {}  # resolved run dir -> [open lock file, holders in this process]
_held_lock = threading.Lock()


def _holder_of(lock_path: Path) -> str:
    """Who holds ``lock_path``, as its holder wrote it (``host H pid P``), or a note that it did not say."""
    try:
        text = lock_path.read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        text = []
    return f"host {text[0]} pid {text[1]}" if len(text) >= 2 else "a run that has not written its name yet"


def _acquire(path: Path):
    """Open and exclusively lock ``path``'s lock file, write this process into it; the open file."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle = open(path / LOCK_NAME, "a+", encoding="utf-8")
    except OSError as exc:
        raise RunDirError(f"run directory {path}: cannot create it or its lock file: {exc.strerror or exc}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        handle.close()
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise RunDirBusy(f"run directory {path} is in use by another run ({_holder_of(path / LOCK_NAME)}, "
                             f"lock {path / LOCK_NAME}); give another --run-dir or leave it out") from None
        raise RunDirError(f"run directory {path}: cannot lock {LOCK_NAME}: {exc.strerror or exc}") from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{socket.gethostname()} {os.getpid()}\n")
        handle.flush()
    except OSError as exc:
        handle.close()
        raise RunDirError(f"run directory {path}: cannot write {LOCK_NAME}: {exc.strerror or exc}") from None
    return handle


@contextmanager
def run_dir_lock(path: Path) -> Iterator[Path]:
    """Hold ``path`` (created if missing) as this run's directory for the ``with`` block; ``RunDirBusy`` when
    another run holds it."""
    key = Path(os.path.realpath(path))
    with _held_lock:
        entry = _held.get(key)
        if entry is None:
            entry = _held[key] = [_acquire(key), 0]
        entry[1] += 1
    try:
        yield Path(path)
    finally:
        with _held_lock:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                entry[0].close()  # closing the file drops the flock


__all__ = ["LOCK_NAME", "RunDirBusy", "RunDirError", "new_run_dir", "run_dir_lock"]
