"""Recording the calls a job makes on its kernel objects, and replaying them.

``targets`` (the one table of public kernel classes and their recorded
methods, and how a replay rebuilds them), ``values`` (arguments and results
as plain data plus named tensors), ``recorder`` (the window of calls and the
proxies that feed it), ``rank_bundle`` (one rank's bundle on disk),
``writer`` (``rankcheck.recording``: every rank of a user's job, written
through as calls happen), ``world`` (reads a recorded world and names where
its ranks diverge), ``rebuild`` (a rank's objects rebuilt and its calls made
again), ``replay`` (``harness replay --bundle``), ``capture`` (``harness
record``: a scenario recorded as a job would be).
"""
