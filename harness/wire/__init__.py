"""The lowest floor: what the launching side and the rank side exchange, and the records both keep.

A case's files and ids (``case_files``), a rank's result file
(``rank_result``), the progress records a hang diagnosis reads
(``progress``), the phase clock (``phases``). Nothing here imports any other
part of the harness, so every floor above may use it.
"""
