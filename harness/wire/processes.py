"""Whether a process or a process group still exists: the one test the reference cache's claims and the supervisor share.

A target that exists but belongs to another user answers ``PermissionError``
to signal 0: it counts as alive.
"""

from __future__ import annotations

import os
from typing import Callable


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
