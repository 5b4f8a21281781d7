"""Recording a family's calls and replaying them.

``recorder`` (the recorder a user wraps around a system, and bundle replay),
``writer`` (``rankcheck.recording``: every rank of a user's job, written
through as calls happen), ``world`` (reads a recorded world and names the
rank, launch and field that differ), ``replay`` (``harness replay --bundle``).
"""
