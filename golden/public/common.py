"""What the golden stand-ins share: the group, the device, argument names in errors, the launch count.

A stand-in takes ``group=`` as a ``golden.comm.Comm`` (``SoloComm``, a
``ThreadWorld`` rank, or the harness's gloo ``DistComm`` under torchrun:
anything with ``rank``, ``world`` and ``all_gather``); None is a world of
one. It computes on the CPU: ``device`` is accepted for the kernels'
signature and must be None or a CPU device. The golden systems name a bad
argument the harness's way (``call_inputs['x']``); ``argument_names``
rewrites such a message to the public argument's own name (``x``), the way
the kernels' public methods spell it.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator

import torch

# The kernel classes' own rule for public_args, re-exported for the stand-ins.
from contracts.constructor import NOT_DATA, public_args
from contracts.deadlines import SERVING_DEADLINE_NS
from golden.comm import SoloComm

# The architecture whose measured facts (``golden/data/arch/<arch>.json``) give the GPU-specific bits by default.
DEFAULT_ARCH = "sm_90"

_HARNESS_NAME = re.compile(r"call_(?:inputs|params)\[['\"](\w+)['\"]\]")


def comm_of(group: Any) -> Any:
    """The ``Comm`` a stand-in exchanges through: ``group`` itself, or a world of one for None."""
    if group is None:
        return SoloComm()
    for attr in ("rank", "world", "all_gather"):
        if not hasattr(group, attr):
            raise TypeError(f"group: expected a golden.comm.Comm (rank, world, all_gather), missing {attr!r} on "
                            f"{type(group).__name__}")
    return group


def check_device(device: Any) -> None:
    """Accept ``device`` None or a CPU device (the stand-ins compute on the CPU), else a ValueError naming it."""
    if device is None:
        return
    try:
        kind = torch.device(device).type
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"device: expected None or a CPU device, got {device!r}") from exc
    if kind != "cpu":
        raise ValueError(f"device: the golden stand-ins compute on the CPU; expected None or 'cpu', got {device!r}")


def check_flag(name: str, value: Any) -> bool:
    """``value`` if it is a bool, else a TypeError naming ``name`` (the kernels' ``flight_recorder`` rule)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")
    return value


@contextlib.contextmanager
def argument_names() -> Iterator[None]:
    """Re-raise a golden system's ValueError/TypeError with ``call_inputs['x']`` spelled as the argument ``x``."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        message = _HARNESS_NAME.sub(r"\1", str(exc))
        if message == str(exc):
            raise
        raise type(exc)(message) from exc


def describe(value: Any) -> str:
    """A short description of an argument for an error message: dtype and shape, or its type."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    return type(value).__name__


def check_tensor(name: str, value: Any, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """``value`` if it is a ``dtype`` tensor of ``shape``: TypeError for a non-tensor, else ValueError, naming it."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {dtype}, got {value.dtype}")
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(value.shape)}")
    return value


def check_dims(name: str, value: Any, dims: int, what: str) -> torch.Tensor:
    """``value`` if it is a tensor of ``dims`` dimensions, else a ValueError naming it and ``what`` was expected."""
    if not isinstance(value, torch.Tensor) or value.dim() != dims:
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    return value


class LaunchCount:
    """The launches of one instance as its flight recorder numbers them: 0 first, one more per kernel launched."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, launches: int) -> None:
        """Count ``launches`` more launches (modulo 2^32, the device counter's width)."""
        self.value = (self.value + launches) & 0xFFFFFFFF


__all__ = [
    "DEFAULT_ARCH",
    "LaunchCount",
    "NOT_DATA",
    "SERVING_DEADLINE_NS",
    "argument_names",
    "check_device",
    "check_dims",
    "check_flag",
    "check_tensor",
    "comm_of",
    "describe",
    "public_args",
]
