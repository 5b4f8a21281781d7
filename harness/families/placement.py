"""Kernel inputs on the rank's GPU: copies that keep each tensor's layout, and the system wrapper that makes them.

A kernel that needs its static weights and call inputs on its CUDA device
(``FamilyAdapter.kernel_inputs_on_device``) is wrapped in ``DevicePlaced``,
which copies the weights once and every call's inputs at every launch,
keeping each tensor's shape, strides and storage offset (misaligned views
stay misaligned), so a kernel writing an input in place never touches the
harness's copies (the reference and later launches of the same call see
untouched inputs).
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.wire.errors import NotAvailable


def to_device(value: Any, device: Any) -> Any:
    """A copy of tensor ``value`` on ``device`` with the same shape, strides and storage offset; other values as given.

    Host data goes through pinned memory (``kernels.hostcopy``): a pageable
    copy would wait behind a virtual peer's, which may wait for a kernel."""
    import torch  # noqa: PLC0415 - torch loads in seconds: `harness list` and the launching side never need it

    from kernels.hostcopy import to_device as copy_to_device  # noqa: PLC0415 - torch only, no CuTe DSL

    if not isinstance(value, torch.Tensor):
        return value
    if value.numel() == 0:
        return torch.empty_strided(tuple(value.shape), value.stride(), dtype=value.dtype, device=device)
    # The storage prefix up to the last element the view reaches: copying it keeps the
    # storage offset, so a view misaligned on purpose stays misaligned on the device.
    extent = value.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride()))
    flat = value.as_strided((extent,), (1,), 0)
    flat = copy_to_device(flat, device) if flat.device != torch.device(device) else flat.clone()
    return flat.as_strided(tuple(value.shape), value.stride(), value.storage_offset())


def placed(values: Any, device: Any) -> Any:
    """A mapping's tensors copied to ``device`` by ``to_device`` (anything else returned as given)."""
    if not isinstance(values, Mapping):
        return values
    return {k: to_device(v, device) for k, v in values.items()}


def rank_device(world_handle: Any) -> Any:
    """The CUDA device of this rank: the world handle's ``device`` when it is a CUDA one, else the current device."""
    import torch  # noqa: PLC0415 - torch loads in seconds: `harness list` and the launching side never need it

    device = getattr(world_handle, "device", None)
    if device is not None and torch.device(device).type == "cuda":
        return torch.device(device)
    if not torch.cuda.is_available():
        raise NotAvailable("no CUDA device here: the kernel needs its inputs on a GPU")
    return torch.device("cuda", torch.cuda.current_device())


class DevicePlaced:
    """A kernel system fed on ``device``: every call's inputs are copied there (layout kept) before its launch.

    Other attributes (``diag_record``, ``state``...) are the wrapped system's.
    """

    def __init__(self, system: Any, device: Any) -> None:
        self.system = system
        self.device = device

    def launch(self, call_inputs: Any, call_params: Any = None) -> Any:
        """Launch the wrapped system on copies of ``call_inputs`` on the device."""
        return self.system.launch(placed(call_inputs, self.device), call_params)

    def state(self) -> Any:
        """The wrapped system's state."""
        return self.system.state()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system, name)
