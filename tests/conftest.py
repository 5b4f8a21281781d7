"""Setup of the project's own tests: runs they start keep their references and compiled kernels in a cache of
this test session, never in the user's ~/.cache/rankcheck (scenario items of `pytest scenarios/` use the
user's cache, as `make validate` does)."""

import os
import tempfile

if "RANKCHECK_CACHE_DIR" not in os.environ:
    os.environ["RANKCHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="rankcheck-test-cache-")
