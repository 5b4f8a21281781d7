"""Project-wide pytest setup: the repository root on sys.path, the scenario
plugin (``harness.pytest_plugin``: ``pytest scenarios/`` runs the scenarios
through the harness), and `gpu` tests skipped where no CUDA device exists
(they run on the device machine through `make gpu-test`)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.abspath(__file__))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The lent multi-GPU machines must never use NVLink multicast; every process
# the tests start inherits these.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
# The scenario items (`pytest scenarios/`), run by the harness. Where rankcheck is installed the plugin also
# arrives by its pytest11 entry point, registered under this same name, so it is never registered twice.
pytest_plugins = ["harness.pytest_plugin"]


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `make gpu-test` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
