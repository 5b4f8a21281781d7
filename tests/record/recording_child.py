"""A golden markov_sharded system to record, and a child process for the SIGTERM test.

``sharded_system()`` builds markov_sharded/basic's golden system at world 1
with its scenario's calls (the recording tests use it in-process).

``python tests/record/recording_child.py DIR CALLS``: makes ``CALLS`` calls
inside ``rankcheck.recording``, prints ``ready`` and sleeps (at most 120 s,
so a test that never signals it cannot leave it behind).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import rankcheck  # noqa: E402


def sharded_system(world: int = 1):
    """(golden system over SoloComm, static, config, [(inputs, params)] of each call) of markov_sharded/basic."""
    from golden.comm import SoloComm
    from harness.families import adapter, catalog

    [case] = catalog.select(catalog.discover(), family="markov_sharded", names=["basic"])
    static, config, launches = catalog.plan(catalog.load(case.path), world, 0)
    system = adapter("markov_sharded").make_system("golden", SoloComm(), static, config)
    return system, static, config, [(launch.call_inputs, launch.call_params) for launch in launches]


def main() -> None:
    """Record, announce, wait."""
    system, static, config, calls = sharded_system()
    with rankcheck.recording(system, sys.argv[1], family="markov_sharded", config=config, static=static,
                             rank=0, world=1) as recorder:
        for inputs, params in calls[: int(sys.argv[2])]:
            recorder.launch(inputs, params)
        print("ready", flush=True)
        time.sleep(120)


if __name__ == "__main__":
    main()
