"""A sampler job recorded through ``rankcheck.recording``, in-process or as a child process for the SIGTERM test.

``sampler_job(directory, order, world, planted=None)``: a rank's job for ``run_ranks``
that builds a ``ShardedMarkovSampler`` stand-in (``golden.public``) over the
rank's comm and makes markov_sharded/basic's calls in ``order`` (``planted``:
another order for some ranks) inside ``rankcheck.recording({"sampler": ...})``.

``python tests/record/public_recording_child.py DIR CALLS``: world 1, makes
``CALLS`` calls, prints ``ready`` and sleeps (at most 120 s, so a test that
never signals it cannot leave it behind).
"""

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "golden"))

import rankcheck  # noqa: E402


def sampler_job(directory, order, world: int, planted=None, announce: bool = False):
    """The per-rank job at ``world`` (module docstring); returns the sampler's flight launches."""
    import test_stand_ins as drivers

    static, config, calls = drivers.scenario_calls("markov_sharded", "basic", world)

    def job(comm):
        sampler = drivers.sharded_stand_in(static, config, comm)
        with rankcheck.recording({"sampler": sampler}, directory) as recorded:
            for index in (planted or {}).get(comm.rank, order):
                inputs, params = calls[index]
                drivers.sharded_public_call(recorded["sampler"], inputs, params, local=False, rank=comm.rank)
            if announce:
                print("ready", flush=True)
                time.sleep(120)
        return sampler.flight_launches

    return job


def main() -> None:
    """Record ``CALLS`` calls at world 1, announce, wait for the signal."""
    from golden.comm import SoloComm

    sampler_job(sys.argv[1], list(range(int(sys.argv[2]))), 1, announce=True)(SoloComm())


if __name__ == "__main__":
    main()
