"""Reports: the live table and the JSON file (``report``), JUnit XML (``junit``), what went wrong first (``diagnoses``),
the live view (``live``), provenance, per-node reports merged (``merge``), the timing log (``timing_log``), where
the job processes' start-up went (``startup_steps``).
"""
