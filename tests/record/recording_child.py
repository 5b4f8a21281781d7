"""A golden markov_sharded system to record, and a child process for the SIGTERM and SIGKILL tests.

``sharded_system()`` builds markov_sharded/basic's golden system at world 1
with its scenario's calls (the recording tests use it in-process).
``child_system()`` is the one the child records: markov_sharded/tiny of the
harness tests' scenarios (three calls, as basic; about a tenth of a second
of golden work where basic's three calls take seconds).

``python tests/record/recording_child.py DIR CALLS [in-call]``: makes
``CALLS`` calls of ``child_system()`` inside ``rankcheck.recording``, prints
``ready`` and sleeps (at most 120 s, so a test that never signals it cannot
leave it behind); with ``in-call`` it sleeps inside the next call instead,
after the recorder copied that call's inputs (a rank hung or killed in a
kernel).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import rankcheck  # noqa: E402

TEST_SCENARIOS = Path(__file__).resolve().parents[1] / "harness" / "scenarios"


def sharded_system(world: int = 1, name: str = "basic", root: Path | None = None):
    """(golden system over SoloComm, static, config, [(inputs, params)] of each call) of markov_sharded/``name``
    (under ``root``; default: the shipped scenarios)."""
    from golden.comm import SoloComm
    from harness.families import adapter, catalog

    [case] = catalog.select(catalog.discover(root), family="markov_sharded", names=[name])
    static, config, launches = catalog.plan(catalog.load(case.path), world, 0)
    system = adapter("markov_sharded").make_system("golden", SoloComm(), static, config)
    return system, static, config, [(launch.call_inputs, launch.call_params) for launch in launches]


def child_system():
    """``sharded_system`` of markov_sharded/tiny under tests/harness/scenarios: what the child records."""
    return sharded_system(name="tiny", root=TEST_SCENARIOS)


class Stalling:
    """A system whose launches after the first ``calls`` print ``ready`` and sleep inside the call."""

    def __init__(self, system, calls: int) -> None:
        self.system, self.left = system, calls

    def launch(self, call_inputs, call_params):
        if self.left == 0:
            print("ready", flush=True)
            time.sleep(120)
        self.left -= 1
        return self.system.launch(call_inputs, call_params)

    def state(self):
        return self.system.state()


def main() -> None:
    """Record, announce, wait (between calls, or inside one with ``in-call``)."""
    system, static, config, calls = child_system()
    count, in_call = int(sys.argv[2]), sys.argv[3:] == ["in-call"]
    if in_call:
        system = Stalling(system, count)
    with rankcheck.recording(system, sys.argv[1], family="markov_sharded", config=config, static=static,
                             rank=0, world=1) as recorder:
        for inputs, params in calls[: count + in_call]:
            recorder.launch(inputs, params)
        print("ready", flush=True)
        time.sleep(120)


if __name__ == "__main__":
    main()
