"""A torchrun agent slow to shut its rendezvous down: the node that finishes last, planted on purpose, not by load.

``slow_rendezvous_shutdown`` is selected only through
``$RANKCHECK_TEST_PLANTED_AGENT`` (``harness.launch.torchrun_agent``),
which only tests set. It makes the agent's rendezvous shutdown (its last
use of the job's store, after torchrun's exit barrier) wait until the JSON
report ``$RANKCHECK_TEST_AGENT_WAITS_FOR`` says its run has ended (another
node's: that node's harness is through with every job), at most ``WAIT_S``,
then shut down as torch does. It holds no signal back: its harness must
send it none while it shuts down (``harness.launch.jobs``: an agent past
the exit barrier is left to leave by itself), and a SIGTERM meanwhile ends
it as torchrun would, with an "ended by" line in its log that the test
looks for. The agent's log says how long it waited and whether the report
had ended (``found``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PLANTED_SLOW_AGENT = "tests.harness.planted_agent:slow_rendezvous_shutdown"
WAITS_FOR_VAR = "RANKCHECK_TEST_AGENT_WAITS_FOR"
# A bound on the wait for the event (the other node's report ending), well within the harness's 60 s for an agent's
# shutdown (contracts.deadlines.AGENT_SHUTDOWN_S).
WAIT_S = 30.0


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
    """Make this agent's rendezvous shutdown wait for ``$RANKCHECK_TEST_AGENT_WAITS_FOR``'s run to end."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    original = DynamicRendezvousHandler.shutdown
    report = Path(os.environ[WAITS_FOR_VAR])

    def shutdown(self) -> bool:
        """torch's shutdown once ``report`` says its run ended."""
        print(wait_for(report), file=sys.stderr, flush=True)
        return original(self)

    DynamicRendezvousHandler.shutdown = shutdown
