"""Golden references kept across runs: the content-addressed cache (``cache``) and the pool that fills it ahead of the ranks (``pool``).

Above ``wire`` and ``families``, below the rank side, which reads and writes
the cache while it runs a case.
"""
