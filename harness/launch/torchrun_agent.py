"""``python -m harness.launch.torchrun_agent torch.distributed.run ARGS``: torchrun's agent, ended quietly by a signal.

The harness ends a node's torchrun agent with SIGTERM when its job is done
or out of time: a healthy node's agent waiting in torchrun's exit barrier
for the other nodes, or the agent of a hung job. torchrun turns the signal
into ``SignalException`` and lets it leave ``main``, so every such ending
used to leave a 20-line Python traceback in the job's log of a node that
did nothing wrong. This module runs the module its first argument names
(``torch.distributed.run``, which stays in the command line where tools look
for it) as ``__main__`` with the other arguments, and turns that one
exception into one line and the exit status of a process ended by the
signal (128 + its number). An exception Python can only report as
"ignored" (the rendezvous keep-alive thread's finalizer failing to join
itself while the agent shuts down after its store went away) is one line
too (``sys.unraisablehook``). Anything else the agent raises is left as
torchrun would leave it.

Tests of the harness itself plant an agent that misbehaves on purpose (one
node's agent slow to shut its rendezvous down) through
``$RANKCHECK_TEST_PLANTED_AGENT`` (``tests.module:function``, called before
torchrun runs): like the planted golden system
(``harness.families.systems``), the function must come from this
repository's ``tests/``, and the agent's log says it was planted.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

AGENT_MODULE = "torch.distributed.run"
PLANTED_AGENT_VAR = "RANKCHECK_TEST_PLANTED_AGENT"


def one_line_unraisable(unraisable) -> None:
    """Report an exception Python ignores (a finalizer's, at shutdown) as one line on stderr, not a traceback."""
    exc = unraisable.exc_value
    print(f"rankcheck: torchrun agent {os.getpid()} ignored {type(exc).__name__}: {exc} "
          f"({unraisable.err_msg or 'Exception ignored'} {unraisable.object!r})", file=sys.stderr, flush=True)


def plant_test_agent() -> None:
    """Call the test-only function ``$RANKCHECK_TEST_PLANTED_AGENT`` names, if any, saying so in the agent's log."""
    dotted = os.environ.get(PLANTED_AGENT_VAR, "")
    if not dotted:
        return
    from harness.families.systems import check_test_module, resolve  # noqa: PLC0415 - tests of the harness only

    check_test_module(dotted.partition(":")[0], PLANTED_AGENT_VAR)
    print(f"rankcheck: TEST-ONLY: torchrun agent {os.getpid()} planted with {dotted} (${PLANTED_AGENT_VAR})",
          file=sys.stderr, flush=True)
    resolve(dotted)()


def main(argv: list[str]) -> int:
    """Run the module ``argv[0]`` as ``__main__`` with ``argv[1:]``; a signal that ends it is one line, not a traceback."""
    from torch.distributed.elastic.multiprocessing.api import SignalException  # noqa: PLC0415 - torch: the agent only

    module, sys.argv = argv[0], argv
    sys.unraisablehook = one_line_unraisable
    plant_test_agent()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SignalException as exc:
        print(f"rankcheck: torchrun agent {os.getpid()} ended by {signal.Signals(exc.sigval).name} "
              "(the harness ends an agent when its node's job is done or out of time)", file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
