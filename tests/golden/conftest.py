"""Fixtures of the golden tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_intra_op_thread():
    """Small tensors on a shared CPU: one intra-op thread is faster (restored after the module)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
