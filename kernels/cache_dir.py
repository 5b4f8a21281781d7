"""Where rankcheck keeps what it learns on this machine: the one persistent cache directory.

Everything a run keeps for later runs lives under one directory per user:
the harness's reference outputs and compiled kernels
(``harness.references.cache``), the launch durations it schedules by
(``harness.launch.durations``) and the LL/BT crossovers ``harness bench``
measures for the all-reduce (its ``protocol_rows`` module). It is
``$RANKCHECK_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/rankcheck`` when
that is set, else ``~/.cache/rankcheck``; each lookup reads the environment
anew, so a test or a launcher that sets the variable is followed.

It lives in ``kernels`` (standard library only) because the all-reduce reads
its measured thresholds from there while ``kernels`` imports nothing of the
harness; the harness takes the location from here.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_VAR = "RANKCHECK_CACHE_DIR"


def cache_root() -> Path:
    """The persistent cache directory: ``$RANKCHECK_CACHE_DIR``, else ``$XDG_CACHE_HOME/rankcheck``, else
    ``~/.cache/rankcheck``."""
    configured = os.environ.get(CACHE_DIR_VAR)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "rankcheck"


__all__ = ["CACHE_DIR_VAR", "cache_root"]
