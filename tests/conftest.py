"""Setup of the project's own tests: runs they start keep their references and compiled kernels in a cache of
this test session, never in the user's ~/.cache/rankcheck (scenario items of `pytest scenarios/` use the
user's cache, as `make validate` does). The tests' own compiles really compile (they read the fresh module's
PTX and IR): an artifact directory of the user's (``$RANKCHECK_KERNEL_ARTIFACTS``) is not used; the tests of
that cache set one of their own. A session of gpu tests (``-m gpu``: no gpu test reads a fresh module's PTX or
IR) shares one artifact directory in the session's cache instead (``$RANKCHECK_GPU_TEST_KERNELS`` when set:
``make gpu-test`` names one that its ``validate`` loads afterwards), so a kernel variant compiles once for all of
its xdist workers and the jobs its tests start, not once per process, and runs every process on one intra-op
CPU thread: golden loops on small tensors wait on OpenMP threads at every operation when the CPU is shared
(the all-reduce's golden of one tp-8 script: 2.2 s on one thread, 122 s on torch's default threads beside
another run). The process that made the session's cache removes it when it exits (xdist's
workers and the tests' children inherit it and leave it alone). ``one_intra_op_thread``: a module's golden work in
the test process on one intra-op thread."""

import atexit
import os
import shutil
import tempfile

import pytest

if "RANKCHECK_CACHE_DIR" not in os.environ:
    os.environ["RANKCHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="rankcheck-test-cache-")
    os.environ["RANKCHECK_TEST_CACHE_OWNER"] = str(os.getpid())  # tests/leftover_processes.py: whose session
    atexit.register(shutil.rmtree, os.environ["RANKCHECK_CACHE_DIR"], ignore_errors=True)
os.environ.pop("RANKCHECK_KERNEL_ARTIFACTS", None)


def pytest_configure(config):
    """A gpu session's compiled kernels go to the session cache's ``kernels`` directory and its processes run one
    intra-op thread each (module docstring)."""
    marks = config.getoption("markexpr", "") or ""
    if "gpu" in marks and "not gpu" not in marks:
        os.environ["RANKCHECK_KERNEL_ARTIFACTS"] = (os.environ.get("RANKCHECK_GPU_TEST_KERNELS")
                                                    or os.path.join(os.environ["RANKCHECK_CACHE_DIR"], "kernels"))
        _one_intra_op_thread_per_process()


def _one_intra_op_thread_per_process() -> None:
    """One intra-op CPU thread in this process and the processes it starts (``one_intra_op_thread`` says why)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch  # noqa: PLC0415 - a gpu session loads torch anyway; CPU sessions never reach here

    torch.set_num_threads(1)


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
