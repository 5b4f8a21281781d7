"""The worker's call-agreement check on the kernel path (after each completed launch), on the CPU.

The kernel path has no agreement check before a launch (a disagreement that
hangs the kernels must stay reproducible), so a disagreement the kernels'
protocol does not exchange would complete silently. Here the golden system
stands in for a kernel system (an adapter whose ``kernel`` implementation is
the golden one) and two virtual ranks run ``markov_sharded/rank_disagree``,
where rank 1 calls with another ``query_per_row``: the golden exchange
completes, and the worker must name the disagreement after the launch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from golden.comm import ThreadWorld
from harness.rank import case_run
from harness.families import FamilyAdapter, adapter
from scenarios.loader import get

ROOT = Path(__file__).resolve().parents[2]


class GoldenAsKernel(FamilyAdapter):
    """An adapter whose kernel implementation is the golden system (available without a GPU)."""

    def check_available(self, impl: str) -> None:
        return None

    def make_system(self, impl, world_handle, static, config):
        return self.golden_system(world_handle, static, config)


def run_world_here(scenario_name: str, world: int, impl: str, run_dir: str) -> list:
    """Every rank's result of one case run by ``world`` rank threads of this process with implementation ``impl``."""
    scenario = get(scenario_name)
    fam = adapter(scenario.family)
    stand_in = GoldenAsKernel(**{f.name: getattr(fam, f.name) for f in dataclasses.fields(fam)})
    case_run.adapter = lambda family: stand_in  # this process is the test's own child
    spec = {"family": scenario.family, "name": scenario.name, "path": scenario.source}

    def body(comm):
        return case_run.run_case(spec, rank=comm.rank, group_rank=comm.rank, tp=world, group=None, impl=impl,
                                 run_dir=run_dir, make_handle=lambda f, c=comm: c)

    # a deadline for a hang, not a speed bound: the golden's MMA model is slow on a loaded 2-core machine
    return ThreadWorld(world, timeout_s=600).run(body)


def run_world(scenario_name: str, world: int, impl: str, run_dir) -> list[dict]:
    """Every rank's status, error and launches done, from a fresh child process that runs the case.

    A child, not this pytest worker: the case must meet only its own rank threads and module state, never what an
    earlier test of the same worker left behind (a full run once left one rank waiting 600 s here)."""
    argv = [sys.executable, __file__, scenario_name, str(world), impl, str(run_dir)]
    proc = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=900)  # a hang guard as tests/harness/hang_guard.py, not a speed bound
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_disagreement_the_kernels_complete_is_named_after_the_launch(tmp_path):
    results = run_world("markov_sharded/rank_disagree", 2, "kernel", tmp_path)
    for rank, result in enumerate(results):
        assert result["status"] == "error", result
        assert result["error"]["type"] == "CallDisagreement", result["error"]
        message = result["error"]["message"]
        assert "rank 1" in message and "query_per_row" in message, message
        assert result["launches_done"] == 1  # launch 0 agreed; launch 1 completed, then was named


def test_agreeing_ranks_pass_the_check(tmp_path):
    results = run_world("markov_sharded/basic", 2, "kernel", tmp_path)
    for result in results:
        assert result["status"] == "ok", result
        assert result["mismatch_count"] == 0


if __name__ == "__main__":
    name, world_size, implementation, directory = sys.argv[1:5]
    ranks = run_world_here(name, int(world_size), implementation, directory)
    print(json.dumps([{"status": r.status, "error": r.error, "launches_done": r.launches_done,
                       "mismatch_count": (r.comparison or {}).get("mismatch_count")} for r in ranks]))
