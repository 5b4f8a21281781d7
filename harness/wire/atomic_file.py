"""Files replaced whole or not at all: every file another process or a later run reads is written through ``atomic_write``.

The text goes to a temporary file in the target's directory, is flushed and
fsynced, and ``os.replace`` swaps it in, so a reader sees the old file or the
new one, never a half-written one, and an interrupted write leaves no
temporary file behind. The file gets the mode a plain ``open`` would give
it (``0o666`` less the process's umask), not ``mkstemp``'s private ``0o600``:
reports land on shared paths that others read.

``writable_dir`` is asked before a run starts for each directory it will
write (the run directory, the cache): it creates the directory and writes,
fsyncs and removes a small probe file there, so a read-only, full or
missing-permission directory is a ``DirectoryNotWritable`` (a ValueError:
exit 2 at the command line) naming the directory and the reason, before any
process is launched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read from ``/proc/self/status`` (setting and restoring it would race other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc: the one portable way to read it
    os.umask(mask)
    return mask


def umask_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` less the process's umask."""
    return 0o666 & ~current_umask()


def atomic_write(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file in the same directory, fsync, rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(fd, umask_mode())
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class DirectoryNotWritable(ValueError):
    """A directory a run must write that cannot be written; the message names it and why."""


PROBE_BYTES = 4096


def writable_dir(path: str | os.PathLike, what: str) -> Path:
    """``path`` created if needed and shown writable by a fsynced probe file, else ``DirectoryNotWritable`` naming ``what``."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".rankcheck-probe.", dir=target)
    except OSError as exc:
        raise DirectoryNotWritable(f"{what} {target}: cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise DirectoryNotWritable(f"{what} {target}: cannot write: {exc.strerror or exc}") from exc
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass
    return target
