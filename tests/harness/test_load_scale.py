"""Default allowances scaled by the load per core (``harness.launch.load_scale``), and ``validate`` using them."""

import io
from pathlib import Path

from harness.families.catalog import DEFAULT_PER_LAUNCH_S
from harness.launch.load_scale import CASE_ALLOWANCE_S, MAX_FACTOR, STARTUP_S, describe, load_factor, scaled_defaults
from harness.validate import ValidateRequest, run_validate
from harness.wire.case_result import CaseResult

SCENARIOS = str(Path(__file__).resolve().parent / "scenarios")


def test_the_factor_is_the_load_per_core_between_1_and_the_cap():
    assert load_factor(0.5, cores=2) == 1.0
    assert load_factor(12.0, cores=2) == 6.0
    assert load_factor(500.0, cores=2) == MAX_FACTOR


def test_defaults_scale_and_given_values_stay_as_given():
    assert scaled_defaults(3.0, startup_s=None, per_launch_s=None) == {
        "startup_s": 3 * STARTUP_S, "case_allowance_s": 3 * CASE_ALLOWANCE_S, "per_launch_s": 3 * DEFAULT_PER_LAUNCH_S}
    given = scaled_defaults(3.0, startup_s=50.0, per_launch_s=7.0)
    assert (given["startup_s"], given["per_launch_s"]) == (50.0, 7.0)


def test_validate_gives_every_job_the_scaled_allowances_and_the_header_says_so(monkeypatch, tmp_path):
    seen = []

    class RecordingRunner:
        """Notes each job's settings and reports a pass instead of starting processes."""

        after_verdicts_s = 0.0  # no job process ran, so none took time to end after its verdicts

        def __init__(self, settings, argv_for, on_result, on_note, job_numbers):
            self.settings, self.on_result = settings, on_result

        def run(self, cases, world):
            """Record the settings; pass every case."""
            seen.append((self.settings.startup_s, self.settings.case_allowance_s, self.settings.per_launch_s))
            for case in cases:
                self.on_result(CaseResult(case.family, case.name, world, self.settings.launcher, "pass"))

    monkeypatch.setattr("harness.validate.JobRunner", RecordingRunner)
    stream = io.StringIO()
    req = ValidateRequest(launcher="cpu", worlds=[1], scenarios=["markov_sharded/tiny"], scenario_root=SCENARIOS,
                          run_dir=str(tmp_path / "run"), store=None, load_scale=4.0)
    assert run_validate(req, stream=stream) == 0
    assert seen == [(4 * STARTUP_S, 4 * CASE_ALLOWANCE_S, 4 * DEFAULT_PER_LAUNCH_S)]
    assert "# load 4.0 per core: default allowances scaled x4.0" in stream.getvalue()


def test_the_header_line_shows_the_allowances_used_given_values_as_given():
    assert describe(1.0) == ""
    scaled = describe(2.0)
    assert f"startup {2 * STARTUP_S:g} s, case {2 * CASE_ALLOWANCE_S:g} s, per launch {2 * DEFAULT_PER_LAUNCH_S:g} s)" in scaled
    given = describe(2.0, startup_s=50.0, per_launch_s=7.0)
    assert "startup 50 s (given)" in given and "per launch 7 s (given)" in given
