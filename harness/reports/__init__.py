"""Reports: the live table, JUnit XML and JSON (``report``, ``live``), provenance, merging per-node reports, the timing log.
"""
