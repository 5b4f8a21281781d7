"""The rankcheck harness, in floors; each imports only its own floor and those below (tests/harness/test_structure.py).

Bottom first: ``wire`` (what the launching side and the ranks exchange, and
the records both keep), ``families`` (one adapter per kernel family, the
scenario catalog, the architecture's facts), ``references`` (the golden
reference cache and the pool that fills it), ``rank`` (what runs in each
rank's process), ``launch`` (launchers, supervision, hang diagnosis,
evidence), ``reports``, ``recording`` (recording a user's job and replaying
it), ``calibration`` (GPU arithmetic probes); on top ``cli``, ``validate``,
``replay`` and ``compile_gate``, and the tools ``bench``, ``fuzz`` and
``scale``.
"""
