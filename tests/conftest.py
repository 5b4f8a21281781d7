"""Setup of the project's own tests: runs they start keep their references and compiled kernels in a cache of
this test session, never in the user's ~/.cache/rankcheck (scenario items of `pytest scenarios/` use the
user's cache, as `make validate` does). The tests' own compiles really compile (they read the fresh module's
PTX and IR): an artifact directory of the user's (``$RANKCHECK_KERNEL_ARTIFACTS``) is not used; the tests of
that cache set one of their own. The process that made the session's cache removes it when it exits (xdist's
workers and the tests' children inherit it and leave it alone)."""

import atexit
import os
import shutil
import tempfile

if "RANKCHECK_CACHE_DIR" not in os.environ:
    os.environ["RANKCHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="rankcheck-test-cache-")
    atexit.register(shutil.rmtree, os.environ["RANKCHECK_CACHE_DIR"], ignore_errors=True)
os.environ.pop("RANKCHECK_KERNEL_ARTIFACTS", None)
