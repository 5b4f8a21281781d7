"""Files replaced whole or not at all: every file another process or a later run reads is written through ``atomic_write``.

The text goes to a temporary file in the target's directory, is flushed and
fsynced, and ``os.replace`` swaps it in, so a reader sees the old file or the
new one, never a half-written one, and an interrupted write leaves no
temporary file behind. The file gets the mode a plain ``open`` would give
it (``0o666`` less the process's umask), not ``mkstemp``'s private ``0o600``:
reports land on shared paths that others read.
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
