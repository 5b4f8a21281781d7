"""kernels.hostcopy: host<->device copies through pinned memory (values on the CPU, the CUDA path under `gpu`)."""

from __future__ import annotations

import pytest
import torch

from kernels import hostcopy


def test_host_tensors_stay_where_they_are():
    x = torch.arange(6, dtype=torch.int32).view(2, 3)
    assert hostcopy.to_host(x) is x
    assert hostcopy.to_device(x, "cpu") is x
    out = hostcopy.outputs_to_host({"a": x, "n": 3})
    assert out["a"] is x and out["n"] == 3
    assert hostcopy.outputs_to_host([x]) == [x]


def test_copy_into_a_host_tensor_copies_values():
    target = torch.zeros(2, 3)
    hostcopy.copy_into(target, torch.ones(2, 3))
    assert torch.equal(target, torch.ones(2, 3))


@pytest.mark.gpu
def test_round_trip_through_pinned_memory_keeps_bits_and_layout():
    x = torch.randn(5, 7).to(torch.bfloat16)[:, 1:6]  # a strided view
    on_device = hostcopy.to_device(x, "cuda")
    assert on_device.is_cuda and on_device.shape == x.shape
    back = hostcopy.to_host(on_device)
    assert back.is_pinned()
    assert torch.equal(back.view(torch.int16), x.view(torch.int16))
    target = torch.zeros(5, 5, dtype=torch.bfloat16, device="cuda")
    hostcopy.copy_into(target, x)
    assert torch.equal(hostcopy.to_host(target).view(torch.int16), x.contiguous().view(torch.int16))
