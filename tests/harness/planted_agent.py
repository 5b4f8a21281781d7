"""A torchrun agent slow to shut its rendezvous down: the node that finishes last, planted on purpose, not by load.

``slow_rendezvous_shutdown`` is selected only through
``$RANKCHECK_TEST_PLANTED_AGENT`` (``harness.launch.torchrun_agent``),
which only tests set. It makes the agent's rendezvous shutdown (its last
use of the job's store, after torchrun's exit barrier) wait until the JSON
report ``$RANKCHECK_TEST_AGENT_WAITS_FOR`` says its run has ended (another
node's: that node's harness is through with every job), at most ``WAIT_S``,
then shut down as torch does. Its harness's SIGTERM meanwhile (a node ends
its waiting agent a grace period after every node is done) is held back
until the shutdown has spoken to the store, then sent again. The agent's
log says how long it waited and whether the report had ended (``found``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

PLANTED_SLOW_AGENT = "tests.harness.planted_agent:slow_rendezvous_shutdown"
WAITS_FOR_VAR = "RANKCHECK_TEST_AGENT_WAITS_FOR"
# Below the harness's SIGTERM plus its grace period before SIGKILL (harness.launch.jobs.JobSettings.grace_s: 3 s each).
WAIT_S = 4.0


def run_ended(report: Path) -> bool:
    """Whether the JSON report ``report`` says its run has ended (it is written atomically, again at the end)."""
    try:
        return not json.loads(report.read_text(encoding="utf-8"))["summary"]["ended"].startswith("running")
    except (OSError, ValueError, KeyError):
        return False


def wait_for(report: Path) -> str:
    """Wait until ``report`` says its run has ended, at most ``WAIT_S``; the wait in words for the agent's log."""
    started = time.monotonic()
    while not run_ended(report) and time.monotonic() - started < WAIT_S:
        time.sleep(0.05)
    return (f"rankcheck test: the rendezvous shutdown waited {time.monotonic() - started:.1f} s for {report} "
            f"({'found' if run_ended(report) else 'not found'})")


def slow_rendezvous_shutdown() -> None:
    """Make this agent's rendezvous shutdown wait for ``$RANKCHECK_TEST_AGENT_WAITS_FOR``'s run to end, a SIGTERM
    held back."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    original = DynamicRendezvousHandler.shutdown
    report = Path(os.environ[WAITS_FOR_VAR])

    def shutdown(self) -> bool:
        """torch's shutdown once ``report`` says its run ended; a SIGTERM meanwhile is sent again once it returned."""
        held: list[int] = []
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: held.append(signum))
        try:
            print(wait_for(report), file=sys.stderr, flush=True)
            return original(self)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if held:
                os.kill(os.getpid(), held[0])  # as if it came now: torchrun's handler raises SignalException

    DynamicRendezvousHandler.shutdown = shutdown
