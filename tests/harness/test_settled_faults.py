"""Faults a family's kernels settle in step run in their world's batch, after its healthy cases.

On the kernel path a fault case runs in a job of its own (a kernel may
hang on it), except the injected kinds its family's adapter names in
``settled_in_step``: such a case joins its world's cpu-size batch, after
the batch's healthy cases, so that should it hang after all only the cases
after it run again. The golden path is unchanged.
"""

from dataclasses import replace

from harness.families.catalog import discover
from harness.families.registry import ADAPTERS
from harness.launch.jobs import JobRunner, JobSettings
from harness.launch.schedule import job_units


def by_key():
    """Every shipped scenario as a case, by ``family/name``."""
    return {case.key: case for case in discover()}


def test_each_family_settles_a_skipped_call_in_step_and_nothing_that_hangs_or_ends_a_rank():
    for family, found in ADAPTERS.items():
        assert "skip_launch" in found.settled_in_step, family
        assert not found.settled_in_step & {"hang", "crash", "delay", "repeat_launch"}, family


def test_settled_faults_join_the_batch_and_the_others_stay_alone():
    cases = by_key()
    for key in ("allreduce_mhc/skip_launch", "markov_sharded/skip_launch", "markov_fused/skip_launch",
                "markov_fused/rank_disagree"):
        assert not cases[key].isolated("kernel"), key
    for key in ("allreduce_mhc/rank_disagree", "markov_sharded/rank_disagree", "markov_sharded/repeat_launch",
                "allreduce_mhc/hang", "markov_fused/crash", "markov_sharded/delay_timeout"):
        assert cases[key].isolated("kernel"), key
    # the same case without its family's declaration is a job of its own, as every kernel-path fault was
    assert replace(cases["allreduce_mhc/skip_launch"], settled_in_step=()).isolated("kernel")
    # a case whose faults are only partly settled in step stays alone
    mixed = replace(cases["markov_fused/skip_launch"], harness_kinds=("hang", "skip_launch"))
    assert mixed.isolated("kernel") and mixed.isolated("golden")


def test_the_units_of_world_2_hold_the_settled_faults_in_the_cpu_size_batch():
    cases = [c for c in by_key().values() if 2 in c.worlds]
    units = job_units([(2, cases)], "kernel")
    batch = next(u for u in units if not u.isolated and not u.heavy)
    alone = {u.cases[0].key for u in units if u.isolated}
    assert {"allreduce_mhc/skip_launch", "markov_fused/rank_disagree"} <= {c.key for c in batch.cases}
    assert "allreduce_mhc/skip_launch" not in alone and "allreduce_mhc/rank_disagree" in alone


def test_the_job_runs_the_settled_faults_after_the_healthy_cases(monkeypatch):
    cases = by_key()
    chosen = [cases[k] for k in ("markov_fused/skip_launch", "markov_fused/basic", "allreduce_mhc/skip_launch",
                                 "allreduce_mhc/basic_ll", "allreduce_mhc/hang")]
    runner = JobRunner(JobSettings(launcher="virtual", impl="kernel", backend="none", run_dir=None),
                       lambda *a: [], lambda result: None)
    jobs = []
    monkeypatch.setattr(runner, "_run_pending", lambda pending, world, tp: jobs.append([p.case.key for p in pending]))
    runner.run(chosen, 2)
    assert jobs == [["markov_fused/basic", "allreduce_mhc/basic_ll", "markov_fused/skip_launch",
                     "allreduce_mhc/skip_launch"], ["allreduce_mhc/hang"]]
