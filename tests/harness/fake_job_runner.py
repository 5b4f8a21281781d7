"""A stand-in for ``harness.validate.JobRunner`` that reports chosen statuses without starting processes."""

from harness.wire.case_result import CaseResult


def fake_runner(statuses, *, interrupt_after=None):
    """A JobRunner stand-in and the (case key, world) of each case it reported, in turn: reports ``statuses`` in
    turn (then pass); raises KeyboardInterrupt after ``interrupt_after`` results."""
    reported = []

    class FakeRunner:
        """Reports each case with the next status instead of running it."""

        after_verdicts_s = 0.0  # no job process ran, so none took time to end after its verdicts

        def __init__(self, settings, argv_for, on_result, on_note, job_numbers):
            self.settings, self.on_result = settings, on_result

        def run(self, cases, world):
            """Report a verdict per case; stop with KeyboardInterrupt when told to."""
            for case in cases:
                if interrupt_after is not None and len(reported) == interrupt_after:
                    raise KeyboardInterrupt
                status = statuses[len(reported)] if len(reported) < len(statuses) else "pass"
                reported.append((case.key, world))
                self.on_result(CaseResult(case.family, case.name, world, self.settings.launcher, status))

    return FakeRunner, reported
