"""Golden stand-ins of the kernels' public classes: the same constructors and methods, computed on the CPU.

A serving engine holds each family's public kernel class (``kernels/<family>/``);
where no GPU exists (CPU tests, the offline replay of a recording) a class
of the same name computed on the CPU takes its place: the kernel class's
constructor keywords and method signatures (names, defaults, return
values, in-place writes into the caller's buffers, a ``ValueError`` /
``TypeError`` naming a bad argument before anything changes), the same
bits, computed by the family's golden system and functions, over
``group=`` a ``golden.comm.Comm`` (``ThreadWorld`` ranks, or the harness's
gloo comm under torchrun; None: world 1). None models deadlines, grids,
memory layout or CUDA graphs.

Each stand-in lives in its family's golden package,
``golden/<family>/public.py``, whose docstring says what is and is not
modelled and whose ``STAND_INS`` maps its kernel class (by module and
name) to the stand-in. This package names no family: it finds those
modules through the family registry (``golden.families``) and offers
their merged ``STAND_INS`` and each stand-in class by its name
(``from golden.public import <class name>``); ``golden.public.common`` holds
what the stand-ins share.

Two conventions shared with the kernel classes (docs/interfaces.md):

- ``public_args``: the constructor's arguments by name as passed (tensors
  by reference), without ``group``, ``device``, ``diag`` and
  ``flight_dir``, so ``cls(**obj.public_args, group=comm)`` rebuilds an
  equal object here from a kernel instance (golden-only keywords such as
  ``arch`` keep their defaults).
- ``flight_launches``: the instance's kernel launches so far, numbered as
  its flight recorder numbers them (``kernels.flight``, record word 0: 0
  for the first launch).

Each stand-in class also says which of the caller's buffers its methods
write in place (``WRITES``: method -> argument names, compared bit for bit)
and which the kernel writes with values not modelled here (``SCRATCH``: the
fused step's per-CTA partial results), for a recorder that compares a
replay's buffers with a recording's.
"""

import importlib
import importlib.util

# The module of a family's golden package that holds its stand-in (``golden/<family>/public.py``).
STAND_IN_MODULE = "public"


def _collect() -> dict[str, type]:
    """``STAND_INS`` of every family that has a stand-in module, merged, in the families' order."""
    # Imported here: the registry's discovery imports every package of golden, this one included.
    from golden.families import FAMILIES  # noqa: PLC0415

    found: dict[str, type] = {}
    for family in FAMILIES:
        name = f"golden.{family}.{STAND_IN_MODULE}"
        if importlib.util.find_spec(name) is not None:
            found.update(importlib.import_module(name).STAND_INS)
    return found


def __getattr__(name: str):
    """``STAND_INS``, or a stand-in class by its name, collected on first use.

    Lazy because each family's stand-in module imports ``golden.public.common``,
    which runs this package first: collecting here at import would import a
    stand-in module that is itself still being imported. A private or
    all-capitals name other than ``STAND_INS`` is never a stand-in class, so it
    is refused without collecting: the registry's discovery asks this package
    for ``FACTS`` while the registry itself is still being imported.
    """
    if name != "STAND_INS" and (name.startswith("_") or name.isupper()):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if "STAND_INS" not in globals():
        stand_ins = _collect()
        globals().update({cls.__name__: cls for cls in stand_ins.values()}, STAND_INS=stand_ins)
    if name in globals():
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The package's names, the stand-in classes included."""
    return sorted({*globals(), "STAND_INS", *(cls.__name__ for cls in __getattr__("STAND_INS").values())})
