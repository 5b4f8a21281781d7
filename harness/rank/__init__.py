"""The rank side: what runs inside each rank's process.

``worker`` (the per-rank entry), ``case_run`` (one case in phases),
``agreement`` (every rank makes the same call), ``faults`` (injected faults
on the rank), ``golden_check`` (the stored golden bits), ``graphs`` (CUDA
graph capture and replay), ``compare`` (bit comparison), ``dist_comm``
(the process group), ``standby`` (a spare process waiting for its job). It
never imports the launching side or the reports: what both sides share is in
``harness.wire``.
"""
