"""The harness injections a rank acts on itself, and the check of a call the system should refuse.

Injected faults addressed to this rank (``Launch.injections``) are acted on
just before the launch they name, after a progress record that announces
them, so the watchdog's diagnosis can name the rank and launch even when
the rank never returns:

- ``delay``: record it, then sleep ``seconds`` and launch;
- ``hang``: record it, say so on stderr (the rank's log), then sleep until
  killed (``_sleep_forever``: the frame the hang's stack dump shows);
- ``crash``: record it, then end the rank as ``how`` says: exit with
  ``CRASH_EXIT`` (default), kill itself with SIGKILL (``signal``), or raise
  ``InjectedCrash`` out of the rank (``exception``), having said so on
  stderr, so the rank's log holds why it ended;
- ``skip_launch``: record it and do not launch;
- ``repeat_launch``: launch twice (``launch_attempts``).

``rank_disagree`` and ``bad_input`` arrive through the inputs the builders
make for this rank; a call the scenario expects refused (``bad_input``) is
judged with ``refusal``: the error's type and message, and the system
state unchanged.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from typing import Any, Callable

from harness.wire.case_files import CRASH_EXIT


class InjectedCrash(RuntimeError):
    """The ``crash`` injection with ``how: exception``: raised out of the rank on purpose."""


def _sleep_forever() -> None:
    """Block this rank until it is killed (the injected hang)."""
    while True:
        time.sleep(3600)


def _say(text: str) -> None:
    """One line on this rank's stderr (its log), written at once: the rank may end the next moment."""
    print(f"rankcheck rank {os.environ.get('RANK', '?')} (pid {os.getpid()}): {text}", file=sys.stderr, flush=True)


def _crash(how: str) -> None:
    """End this rank the way a ``crash`` injection says: exit code, signal or exception."""
    _say(f"injected crash ({how}): " + {"signal": "killing itself with SIGKILL", "exception": "raising InjectedCrash"}
         .get(how, f"exiting with code {CRASH_EXIT}"))
    if how == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exception":
        raise InjectedCrash("injected crash (how: exception)")
    os._exit(CRASH_EXIT)


def act_before_launch(launch: Any, progress: Any, state: Callable[[], dict]) -> bool:
    """Act on the launch's ``delay``, ``hang``, ``crash`` and ``skip_launch`` injections; True when it is skipped."""
    inj = {i.kind: i for i in launch.injections}
    k, params = launch.index, launch.call_params
    if "delay" in inj:
        progress.write("delay", k, params, state(), seconds=inj["delay"].get("seconds"))
        time.sleep(float(inj["delay"].get("seconds")))
    if "hang" in inj:
        progress.write("hang", k, params, state())
        _say(f"injected hang before launch {k}: sleeping until killed")
        _sleep_forever()
    if "crash" in inj:
        progress.write("crash", k, params, state(), how=inj["crash"].get("how"))
        _crash(str(inj["crash"].get("how", "exit")))
    if "skip_launch" in inj:
        progress.write("skip", k, params, state())
        return True
    return False


def launch_attempts(launch: Any) -> int:
    """How many times the rank launches this call: twice under ``repeat_launch``, else once."""
    return 2 if any(i.kind == "repeat_launch" for i in launch.injections) else 1


def error_matches(exc: BaseException, expected: Any) -> bool:
    """Whether ``exc`` is the expected error (class name or a base's, and the message regex)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return expected.type in names and re.search(expected.match, str(exc)) is not None


def expected_of(launch: Any) -> dict:
    """The launch's expected error as the result records it (``type`` and ``match``)."""
    return {"type": launch.expected_error.type, "match": launch.expected_error.match}


def refusal(launch: Any, exc: BaseException, before: dict, after: dict) -> dict:
    """The record of a call the system refused: its error, whether it was the expected one, and the state around it."""
    return {"launch": launch.index, "type": type(exc).__name__, "message": str(exc)[:1000],
            "expected": expected_of(launch), "matched": error_matches(exc, launch.expected_error),
            "state_unchanged": before == after, "state_before": before, "state_after": after}
