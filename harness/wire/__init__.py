"""The lowest floor: what the launching side and the rank side exchange, and the records both keep.

A case's files and ids (``case_files``), a rank's result file
(``rank_result``), the progress records a hang diagnosis reads
(``progress``), the phase clock (``phases``), the verdict record and exit
codes (``case_result``), whole-file writes (``atomic_file``), the
not-available error (``errors``), process liveness (``processes``), a
rank's stack file (``worker_evidence``) and the hand-over of a job to a
spare process (``spare_handoff``). Nothing here imports any other part of
the harness, so every floor above may use it.
"""
