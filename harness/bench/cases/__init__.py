"""Benchmark cases, one module per family; every module here is imported by
``harness.bench.registry.discover``. See ``harness/bench/registry.py`` for how
to declare a case."""
