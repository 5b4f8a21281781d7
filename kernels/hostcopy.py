"""Copies between host and device that never take CUDA's pageable staging path.

Why. A ``cudaMemcpy``/``cudaMemcpyAsync`` to or from pageable host memory
(``tensor.cpu()``, ``.item()``, ``.tolist()``, ``cpu_tensor.to("cuda")``) goes
through the driver's staging buffers: the call first waits for the stream's
earlier work and blocks the calling thread until the copy is done, and such
copies of one CUDA context are serialized. Virtual ranks
(``kernels.fabric.VirtualFabric``) are threads of one context whose kernels
spin until every peer has launched. So a rank copying its outputs back while
its kernel waits for a peer holds the staging path, and the peer's own
pageable copy of its next inputs (before its launch) waits behind it: neither
kernel can finish until the peer's deadline traps the context. Seen on the
H200: the awaited rank was always
inside a pageable copy when its peer timed out.

How. Host to device: the data is first copied on the CPU into page-locked
memory (torch's caching host allocator) and then enqueued with
``non_blocking=True``: the call returns at once and never waits for the
stream (torch records an event so the pinned block is not reused before the
copy ran). Device to host: the copy lands in page-locked memory, enqueued
asynchronously on the tensor's current stream, and then only that stream is
synchronized, which waits for this rank's own work and holds nothing another
thread needs.

Torch only (no CuTe DSL): the harness uses it on its virtual-rank path too.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    """A host ``tensor`` in page-locked memory: itself when it is, else a copy."""
    return tensor if tensor.is_pinned() else tensor.pin_memory()


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``tensor`` on ``device``: as is when it is there, else copied (from the host through pinned memory, asynchronously)."""
    device = torch.device(device)
    if tensor.device == device:
        return tensor
    if tensor.device.type != "cpu" or device.type != "cuda":
        return tensor.to(device)
    return _pinned(tensor).to(device, non_blocking=True)


def copy_into(target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``target.copy_(source)`` where a host ``source`` goes through pinned memory, asynchronously."""
    if source.device.type == "cpu" and target.device.type == "cuda":
        source = _pinned(source)
    return target.copy_(source, non_blocking=True)


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of ``tensor`` (pinned, complete on return): this rank's stream is synchronized, nothing else."""
    if tensor.device.type != "cuda":
        return tensor
    out = tensor.to("cpu", non_blocking=True)
    torch.cuda.current_stream(tensor.device).synchronize()
    return out


def outputs_to_host(outputs: Any) -> Any:
    """A mapping's CUDA tensors copied to the host by ``to_host`` (other values, and non-mappings, as given)."""
    if not isinstance(outputs, Mapping):
        return outputs
    return {k: to_host(v) if isinstance(v, torch.Tensor) else v for k, v in outputs.items()}


__all__ = ["copy_into", "outputs_to_host", "to_device", "to_host"]
