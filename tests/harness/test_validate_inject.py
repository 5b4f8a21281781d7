"""``validate --inject SCENARIO:KIND:...``: a fault planted in one scenario for one run, checked before anything runs.

The injection is checked against the scenario as the run runs it (ranks of
a TP group, the run's groups) and an error names the argument and the size;
a scenario the selection does not hold, or an argument without a scenario,
is refused naming the argument. The planted copy keeps the scenario's name
and runs at the planned TP size only.
"""

import pytest

from harness.cli import main
from harness.families.catalog import discover, select
from harness.validate import ValidateRequest, plan_worlds, plant_injections
from test_cpu_launcher import SCENARIOS


@pytest.mark.parametrize("inject, needle", [
    ("tiny:hang:rank=1,launch=1,group=2", "--inject 'hang:rank=1,launch=1,group=2': group: expected int in 0..1, "
                                          "got 2 at tp 2, world 4"),
    ("tiny:hang:rank=2,launch=1", "rank: expected int in 0..1, got 2 at tp 2, world 4"),
    ("tiny:rank=1", "--inject: expected SCENARIO:KIND:key=value,..."),
    ("tiny_hang:hang:rank=1,launch=1", "--inject: no scenario named 'tiny_hang'"),
])
def test_a_bad_injection_is_named_before_anything_runs(tmp_path, capsys, inject, needle):
    code = main(["validate", "--launcher", "cpu", "--world", "4", "--tp", "2", "--scenario", "tiny",
                 "--inject", inject, "--scenario-root", str(SCENARIOS), "--run-dir", str(tmp_path)])
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "jobs").exists()


def test_the_planted_copy_is_the_scenario_at_the_planned_tp_size_with_the_fault_in_one_group(tmp_path):
    req = ValidateRequest(launcher="cpu", worlds=[4], tp=2, scenarios=["tiny"],
                          inject=["markov_sharded/tiny:hang:rank=1,launch=1,group=1"])
    pairs = plan_worlds(select(discover(SCENARIOS), names=["tiny"]), req)
    (line,) = plant_injections(pairs, req, tmp_path)
    [(world, [case])] = pairs
    assert (world, case.key, case.worlds, case.fault_groups) == (4, "markov_sharded/tiny", (2,), (1,))
    assert case.path == str(tmp_path / "markov_sharded" / "tiny.yaml") and "hang:rank=1,launch=1,group=1" in line
    assert case.isolated("golden")  # a hang runs in a job of its own
    assert case.in_group(0).outcomes == ("golden",) == case.in_group(1).outcomes  # the scenario's own expectation
