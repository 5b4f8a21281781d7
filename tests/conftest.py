"""Setup of the project's own tests: runs they start keep their references and compiled kernels in a cache of
this test session, never in the user's ~/.cache/rankcheck (scenario items of `pytest scenarios/` use the
user's cache, as `make validate` does). The tests' own compiles really compile (they read the fresh module's
PTX and IR): an artifact directory of the user's (``$RANKCHECK_KERNEL_ARTIFACTS``) is not used; the tests of
that cache set one of their own. The process that made the session's cache removes it when it exits (xdist's
workers and the tests' children inherit it and leave it alone). ``one_intra_op_thread``: a module's golden work in
the test process on one intra-op thread."""

import atexit
import os
import shutil
import tempfile

import pytest

if "RANKCHECK_CACHE_DIR" not in os.environ:
    os.environ["RANKCHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="rankcheck-test-cache-")
    atexit.register(shutil.rmtree, os.environ["RANKCHECK_CACHE_DIR"], ignore_errors=True)
os.environ.pop("RANKCHECK_KERNEL_ARTIFACTS", None)


@pytest.fixture(scope="module")
def one_intra_op_thread():
    """Golden work on small tensors in the test's own process (ranks as threads included): one intra-op thread.

    On a shared CPU (xdist workers and other runs beside it) torch's OpenMP
    threads wait for each other at every operation: a recording's golden
    replay took 30 to 120 s there instead of 5. Restored after the module."""
    import torch  # noqa: PLC0415 - only the tests that ask for it load torch here

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
