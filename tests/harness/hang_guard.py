"""The bound on a test's wait for a process it started (a harness run, a pytest run): a hang guard, not a speed
bound, so it is set for a shared 2-core machine at a load average of 30, where a run that takes 40 s alone takes
ten times as long. The harness's own deadlines decide the verdicts; this only keeps a hung child from hanging the
suite."""

HANG_GUARD_S = 900
