"""A rank ends itself when the harness that launched it is gone.

The harness ends every process tree it started (``harness.launch.supervision``),
but a harness that is killed outright (SIGKILL, the OOM killer, a lost node)
cannot. Its ranks then sit in a collective until gloo's or NCCL's own
timeout, or forever when every one of them waits. So each worker process:

- under torchrun, asks the kernel for SIGKILL when its parent (the torchrun
  agent, which starts its workers from its main thread) dies
  (``prctl(PR_SET_PDEATHSIG)`` through ctypes, Linux only);
- starts a daemon thread that every ``POLL_S`` checks that the harness
  named in ``$RANKCHECK_HARNESS_PROCESS`` (``pid start``, set by the
  launching side's job environment) still exists with the same start time
  (a reused PID is not the harness), and otherwise writes one line to its
  log and leaves with ``HARNESS_GONE_EXIT``. The torchrun agent sees its
  worker fail, ends the others and exits; they do the same check anyway.

A worker started without the variable (by hand, by a test) watches nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

from harness.wire.case_files import HARNESS_GONE_EXIT
from harness.wire.processes import HARNESS_VAR, process_is

POLL_S = 0.5
PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent thread ends (Linux); whether it was set."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(harness: str, stop: threading.Event) -> None:
    """Leave the process with HARNESS_GONE_EXIT once the harness ``harness`` (``pid start``) no longer exists."""
    while not stop.wait(POLL_S):
        if not process_is(harness):
            print(f"rankcheck: the harness that launched this rank (pid {harness.split()[0]}) is gone; "
                  f"this rank ends itself", file=sys.stderr, flush=True)
            os._exit(HARNESS_GONE_EXIT)


def watch_harness(environ=os.environ) -> threading.Event | None:
    """Start the harness watch (and, under torchrun, the parent-death signal); the event that stops the watch, or
    None when no harness is named."""
    if environ.get("TORCHELASTIC_RUN_ID"):
        die_with_parent()
    harness = environ.get(HARNESS_VAR)
    if not harness:
        return None
    stop = threading.Event()
    threading.Thread(target=_watch, args=(harness, stop), name="harness-watch", daemon=True).start()
    return stop


__all__ = ["POLL_S", "die_with_parent", "watch_harness"]
