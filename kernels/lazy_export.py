"""A kernel family package's lazy public names: importing the package imports neither CuTe DSL nor torch.

A family package (``kernels/<family>/__init__.py``) sets
``__getattr__ = lazy_exports({"Name": "kernels.<family>.host"})``: ``Name``
is imported from its module on the first use of the package's attribute,
so ``kernels.flight`` (which reads every package's ``FLIGHT_CODE`` and
``FLIGHT_KERNELS``) and the CPU tests import the packages cheaply.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that returns each name of ``homes`` imported from its module (name: module)."""

    def __getattr__(name: str) -> Any:
        """``name`` from its module in ``homes``, else an AttributeError."""
        if name not in homes:
            raise AttributeError(name)
        return getattr(importlib.import_module(homes[name]), name)

    return __getattr__


__all__ = ["lazy_exports"]
