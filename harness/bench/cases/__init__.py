"""Benchmark cases of no family (the method's baselines) and what every family's cases share (checks, virtual
ranks, torchrun notes); a family's own cases live in its home (``harness/families/<family>/bench*.py``). Every
module here is imported by ``harness.bench.registry.discover``. See ``harness/bench/registry.py`` for how to
declare a case."""
